package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// earlier is a replica of the version before leases were judged on Redis's
// clock, as it runs during a rolling upgrade: it runs that version's
// scripts, verbatim, with every instant read from its own clock, which is
// skew off Redis's.
type earlier struct {
	c      *redis.Client
	prefix string
	skew   time.Duration
	lease  time.Duration
}

// The earlier version's scripts.
var (
	earlierReserve = redis.NewScript(`
local took = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
	local cur = redis.call('HMGET', KEYS[1], 'st', 'tok', 'fp', 'bd', 'sc', 'k', 'rid', 'ca', 'ua', 'ea', 'lu', 'v')
	local now = tonumber(ARGV[1])
	if tonumber(cur[10]) > now then
		if ARGV[2] ~= '1' or cur[1] ~= 'in_progress' or tonumber(cur[11]) > now
			or cur[3] ~= ARGV[5] or cur[4] ~= ARGV[6] then
			return cur
		end
		took = 1
	end
	-- The old record may hold fields (a value) the new one lacks.
	redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'st', 'in_progress', 'tok', ARGV[4], 'fp', ARGV[5], 'bd', ARGV[6],
	'sc', ARGV[7], 'k', ARGV[8], 'rid', ARGV[9], 'ca', ARGV[10], 'ua', ARGV[11], 'ea', ARGV[12], 'lu', ARGV[13])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return took + 1
`)
	earlierRenew = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
redis.call('HSET', KEYS[1], 'lu', ARGV[2])
return 1
`)
	earlierComplete = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'v', ARGV[3], 'ua', ARGV[4], 'ea', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`)
)

func (e *earlier) key(key string) []string {
	return []string{e.prefix + "{" + store.HashKey("test", key) + "}"}
}

func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// reserve runs the earlier version's Reserve of key for token, with a
// lifetime of an hour, and reports whether it acquired the key.
func (e *earlier) reserve(t testing.TB, key string, token uint64) bool {
	t.Helper()
	now := time.Now().Add(e.skew)
	v, err := earlierReserve.Run(context.Background(), e.c, e.key(key), us(now), "1", strconv.FormatInt(time.Hour.Milliseconds(), 10),
		strconv.FormatUint(token, 10), "fp", "POST /x", "test", key, "req-earlier", us(now), us(now), us(now.Add(time.Hour)), us(now.Add(e.lease))).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, acquired := v.(int64)
	return acquired
}

// renew runs the earlier version's Renew and reports whether the token
// still held the record.
func (e *earlier) renew(t testing.TB, key string, token uint64) bool {
	t.Helper()
	v, err := earlierRenew.Run(context.Background(), e.c, e.key(key), strconv.FormatUint(token, 10), us(time.Now().Add(e.skew+e.lease))).Int()
	if err != nil {
		t.Fatal(err)
	}
	return v == 1
}

// complete runs the earlier version's Complete with a lifetime of ttl.
func (e *earlier) complete(t testing.TB, key string, token uint64, value string, ttl time.Duration) {
	t.Helper()
	now := time.Now().Add(e.skew)
	v, err := earlierComplete.Run(context.Background(), e.c, e.key(key), strconv.FormatUint(token, 10), "succeeded", value,
		us(now), us(now.Add(ttl)), strconv.FormatInt(ttl.Milliseconds(), 10)).Int()
	if err != nil || v != 1 {
		t.Fatalf("earlier complete of %s: %d %v", key, v, err)
	}
}

// TestEarlierVersionRecords: records that replicas of the earlier version
// wrote, on clocks 10 leases off Redis's, before and during a rolling
// upgrade, are judged right by this version, on either client: a holder
// that renews, however far behind its clock, is never taken over; a dead
// holder's key is taken over within two leases of its last renewal,
// however far ahead its clock; completed records replay, their lifetime
// read from the key's TTL. Judged on Redis's clock by their lu, the first
// would be taken over at once and the others only after 10 leases or more.
func TestEarlierVersionRecords(t *testing.T) {
	t.Parallel()
	gc := newClient(t, nil)
	rc := newRueidis(t, testAddr(t))
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix()
			t.Cleanup(func() { dropPrefix(t, gc, prefix) })
			var (
				s   *redisstore.Store
				err error
			)
			if client == "rueidis" {
				s, err = redisstore.NewRueidis(rc, redisstore.Options{Prefix: prefix})
			} else {
				s, err = redisstore.New(gc, redisstore.Options{Prefix: prefix})
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			testEarlierVersionRecords(t, s, gc, prefix)
		})
	}
}

func testEarlierVersionRecords(t *testing.T, s *redisstore.Store, c *redis.Client, prefix string) {
	const lease = time.Second
	ctx := context.Background()
	behind := &earlier{c: c, prefix: prefix, skew: -10 * lease, lease: lease}
	ahead := &earlier{c: c, prefix: prefix, skew: 10 * lease, lease: lease}
	if !behind.reserve(t, "renewing", 101) || !ahead.reserve(t, "dead-ahead", 102) || !behind.reserve(t, "done", 103) {
		t.Fatal("the earlier version did not acquire its keys")
	}
	behind.complete(t, "done", 103, "the answer", time.Hour)

	// An earlier replica whose clock is ahead takes over a record of this
	// version, which it judges stale by its clock, and dies.
	mine := request("taken-by-earlier", time.Hour)
	mine.Record.Token = 201
	if res, err := s.Reserve(ctx, mine); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	farAhead := &earlier{c: c, prefix: prefix, skew: 2 * time.Minute, lease: lease}
	if !farAhead.reserve(t, "taken-by-earlier", 202) {
		t.Fatal("the earlier replica did not take the key over")
	}

	retry := func(key string, token uint64) store.ReserveRequest {
		r := request(key, time.Hour)
		r.Record.Token = token
		r.Lease = lease // the route's lease, the earlier replicas' too
		return r
	}

	t.Run("completed", func(t *testing.T) {
		t.Parallel()
		got, err := s.Get(ctx, "test", store.HashKey("test", "done"))
		if err != nil || got.State != store.Succeeded || string(got.Value) != "the answer" || got.Stale() {
			t.Fatalf("Get: %+v %v", got, err)
		}
		// Its lifetime is the key's: an hour from its completion on Redis's
		// clock, not from its writer's, 10 leases behind.
		if left := got.ExpiresIn(); left < time.Hour-time.Minute || left > time.Hour {
			t.Fatalf("expires in %v, want about an hour", left)
		}
		res, err := s.Reserve(ctx, retry("done", 301))
		if err != nil || res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "the answer" {
			t.Fatalf("Reserve over it: %+v %v", res, err)
		}
	})

	storetest.EarlierHolders(t, s, lease, retry, behind.renew)
}

// TestEarlierVersionReadsThisVersion: a replica of the earlier version
// still reads the records this version writes during the upgrade: it finds
// a live one live, and does not take it over.
func TestEarlierVersionReadsThisVersion(t *testing.T) {
	t.Parallel()
	c := newClient(t, nil)
	s, prefix := newStore(t, c)
	if res, err := s.Reserve(context.Background(), request("new", time.Hour)); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	e := &earlier{c: c, prefix: prefix, lease: time.Minute}
	if e.reserve(t, "new", 2) {
		t.Fatal("the earlier version took a live key over")
	}
}
