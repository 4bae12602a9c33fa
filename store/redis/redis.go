package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/leasewatch"
	"github.com/idem-dev/idem/store/replication"
)

// DefaultPrefix starts every key name when Options.Prefix is empty.
const DefaultPrefix = "idem:"

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Prefix starts the name of every Redis key the store writes; "" means
	// DefaultPrefix. Stores with different prefixes never see each other's
	// records. It must not contain '{' or '}', which would move every record
	// into the prefix's hash slot.
	Prefix string
	// SyncReplicas, when above 0, makes every write (a reservation, a
	// renewal, a completion, a release) wait until that many replicas
	// have it (WAIT) before the store answers: a failover to one of them
	// then loses nothing idem answered. A write fewer replicas confirmed
	// within SyncTimeout fails with replication.ErrNotReplicated (fail
	// closed). On a cluster it is per shard: the replicas of the key's
	// primary. Check (or Replication) refuses a server with fewer
	// replicas online.
	SyncReplicas int
	// SyncTimeout bounds the wait for SyncReplicas; 0 means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
}

// DefaultSyncTimeout is Options.SyncTimeout's default: long enough for a
// replica across a slow network, short against the engine's lease.
const DefaultSyncTimeout = 2 * time.Second

// WithDefaults returns o with its empty fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.SyncReplicas > 0 && o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	return o
}

func (o Options) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q contains '{' or '}'", o.Prefix)
	}
	if o.SyncReplicas < 0 {
		return fmt.Errorf("redisstore: SyncReplicas %d is negative", o.SyncReplicas)
	}
	return nil
}

// Store keeps idempotency records in Redis, one hash per record under
// Prefix + "{" + key hash + "}". It is safe for concurrent use. Its zero
// value is not usable; call New.
type Store struct {
	client conn
	prefix string
	// syncReplicas and syncTimeout are Options'.
	syncReplicas int
	syncTimeout  time.Duration
	// deadlines: the client bounds its socket I/O by the context's deadline
	// (ContextTimeoutEnabled), so a call with a deadline needs no watchdog.
	deadlines bool
	closed    atomic.Bool

	// watch judges the leases of records an earlier version wrote (see
	// judge).
	watch leasewatch.Watcher

	// notify is the subscribed connection of Subscribe, made once by
	// notifyOnce (notify.go).
	notifyOnce sync.Once
	notify     *wakeup.Listener
}

var _ store.Store = (*Store)(nil)

// New returns a store that talks to Redis through client: a *redis.Client,
// a *redis.ClusterClient or any other UniversalClient. The store does not
// close client; the caller who made it does, after closing the store.
//
// Give the client ContextTimeoutEnabled: true. Without it go-redis ignores
// context deadlines on the socket, and the store has to run each call with
// a deadline in a goroutine of its own so as to return by the deadline,
// which costs throughput.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if _, ring := client.(*redis.Ring); ring && opts.SyncReplicas > 0 {
		// A Ring pipeline sends a command without a key (WAIT) to a
		// shard of its choosing, not the one that took the write.
		return nil, errors.New("redisstore: SyncReplicas needs a *redis.Client or a *redis.ClusterClient, not a Ring")
	}
	return &Store{client: goredisConn{client}, prefix: opts.Prefix, deadlines: honorsDeadlines(client),
		syncReplicas: opts.SyncReplicas, syncTimeout: opts.SyncTimeout}, nil
}

// NewRueidis returns a store that talks to Redis through a rueidis client,
// which pipelines concurrent calls over one connection per node and bounds
// every call by its context's deadline. It is the faster of the two
// clients (figures in docs/bench/STORE-DESIGN.md); the gateway uses it.
// The store does not close client.
func NewRueidis(client rueidis.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: rueidisConn{client}, prefix: opts.Prefix, deadlines: true,
		syncReplicas: opts.SyncReplicas, syncTimeout: opts.SyncTimeout}, nil
}

func honorsDeadlines(c redis.UniversalClient) bool {
	// A read or write timeout of -2 turns socket deadlines off altogether,
	// the context's included.
	ok := func(enabled bool, rt, wt time.Duration) bool { return enabled && rt != -2 && wt != -2 }
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.Ring:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	}
	return false
}

// Key returns the Redis key name of the record with keyHash. The hash tag
// (the braces) puts the whole record in one cluster slot chosen by the key
// hash, so records spread over the cluster and every script touches one slot.
func (s *Store) Key(keyHash string) string {
	return s.prefix + "{" + keyHash + "}"
}

func (s *Store) key(keyHash string) (string, error) {
	if keyHash == "" || strings.ContainsAny(keyHash, "{}") {
		return "", fmt.Errorf("redisstore: invalid key hash %q", keyHash)
	}
	return s.Key(keyHash), nil
}

// Reserve implements store.Store in one script, so one round trip, except
// when it takes over a stale record of an earlier version (see judge).
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r := &req.Record
	key, err := s.key(r.KeyHash)
	if err != nil {
		return store.Reservation{}, err
	}
	takeOver := "0"
	if req.TakeOverStale {
		takeOver = "1"
	}
	// The token and lu of an earlier version's record watched unchanged
	// for a whole lease, which the script may then take over.
	var watchedTok, watchedLU string
	for attempt := 0; ; attempt++ {
		reply, err := s.write(ctx, "reserve", reserveScript, key,
			takeOver, strconv.FormatInt(micros(req.Lease), 10), strconv.FormatInt(millis(req.TTL), 10),
			strconv.FormatUint(r.Token, 10), r.Fingerprint, r.Binding, r.Scope, r.Key, r.RequestID,
			watchedTok, watchedLU)
		if err != nil {
			return store.Reservation{}, err
		}
		switch v := reply.(type) {
		case int64:
			return store.Reservation{Acquired: true, TookOver: v == 2}, nil
		case []any:
			existing, legacy, err := s.judge(r.KeyHash, v, req.Lease)
			if err != nil {
				return store.Reservation{}, err
			}
			// An earlier version's record is judged stale here, by
			// watching it, and not by the script: run it again, allowed to
			// take over that very version, unless it was already.
			if attempt == 0 && req.TakeOverStale && existing.Stale() && legacy.tok != "" &&
				existing.Fingerprint == r.Fingerprint && existing.Binding == r.Binding {
				watchedTok, watchedLU = legacy.tok, legacy.lu
				continue
			}
			return store.Reservation{Existing: existing}, nil
		}
		return store.Reservation{}, fmt.Errorf("redisstore: reserve: unexpected reply %T", reply)
	}
}

// Get implements store.Store. The key hash already names the scope, so
// scope is not used. It is a script, like the transitions, so that the
// record comes back with the clock of the node that holds it.
func (s *Store) Get(ctx context.Context, _, keyHash string) (store.Record, error) {
	key, err := s.key(keyHash)
	if err != nil {
		return store.Record{}, err
	}
	reply, err := s.eval(ctx, "get", getScript, key)
	if err != nil {
		return store.Record{}, err
	}
	vals, _ := reply.([]any)
	if len(vals) == 0 {
		return store.Record{}, store.ErrNotFound
	}
	r, _, err := s.judge(keyHash, vals, 0)
	return r, err
}

// Renew implements store.Store: the lease runs lease from Redis's now. It
// leaves the record's lifetime alone: a lease never keeps a record past its
// ExpiresAt.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.fenced(ctx, "renew", f.KeyHash, renewScript, strconv.FormatUint(f.Token, 10), strconv.FormatInt(micros(lease), 10))
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if c.State != store.Succeeded && c.State != store.Failed {
		return fmt.Errorf("redisstore: complete: state %q is not succeeded or failed", c.State)
	}
	return s.fenced(ctx, "complete", c.KeyHash, completeScript,
		strconv.FormatUint(c.Token, 10), string(c.State), string(c.Value), strconv.FormatInt(millis(c.TTL), 10))
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.fenced(ctx, "release", f.KeyHash, releaseScript, strconv.FormatUint(f.Token, 10))
}

// fenced runs a script that answers 1 when the token held the record and 0
// when it did not.
func (s *Store) fenced(ctx context.Context, op, keyHash string, script *script, args ...string) error {
	key, err := s.key(keyHash)
	if err != nil {
		return err
	}
	reply, err := s.write(ctx, op, script, key, args...)
	if err != nil {
		return err
	}
	switch reply {
	case int64(1):
		return nil
	case int64(0):
		return store.ErrLeaseLost
	}
	return fmt.Errorf("redisstore: %s: unexpected reply %v", op, reply)
}

// write runs a script that may write, as eval does; with SyncReplicas it
// then waits (WAIT, on the same connection) until that many replicas have
// what the connection wrote, and fails with replication.ErrNotReplicated
// if fewer confirmed within SyncTimeout. A reply that says the script
// wrote nothing (a fenced write's 0, a reservation that found a record)
// is returned as it is: there was nothing of this call to replicate.
func (s *Store) write(ctx context.Context, op string, script *script, key string, args ...string) (any, error) {
	if s.syncReplicas <= 0 {
		return s.eval(ctx, op, script, key, args...)
	}
	var acked int64
	reply, err := s.run(ctx, op, func(ctx context.Context) (any, error) {
		reply, n, err := s.client.evalWait(ctx, script, key, args, s.syncReplicas, s.syncTimeout)
		acked = n
		return reply, err
	})
	if err != nil {
		return nil, err
	}
	if wrote(reply) && acked < int64(s.syncReplicas) {
		return nil, fmt.Errorf("redisstore: %s: %w: %d of %d replica(s) confirmed within %s (the primary has the write; a failover now may lose it)",
			op, replication.ErrNotReplicated, acked, s.syncReplicas, s.syncTimeout)
	}
	return reply, nil
}

// wrote reports whether a script's reply says it wrote: 1 from a fenced
// write, 1 or 2 from a reservation that acquired the key.
func wrote(reply any) bool {
	n, ok := reply.(int64)
	return ok && n > 0
}

// eval runs script on key (EVALSHA, or EVAL when the server lacks it).
func (s *Store) eval(ctx context.Context, op string, script *script, key string, args ...string) (any, error) {
	return s.run(ctx, op, func(ctx context.Context) (any, error) {
		return s.client.eval(ctx, script, key, args)
	})
}

// Cleanup implements store.Store. Redis expires records itself (every
// write sets the key's TTL to the record's remaining lifetime), so there is
// nothing to delete and Cleanup returns 0.
func (s *Store) Cleanup(ctx context.Context, _ int) (int, error) {
	if err := s.check(ctx, "cleanup"); err != nil {
		return 0, err
	}
	return 0, nil
}

// CountExpired is always 0: Redis drops a record the moment its TTL ends
// (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	if err := s.check(ctx, "count expired"); err != nil {
		return 0, err
	}
	return 0, nil
}

// Close implements store.Store: later calls return store.ErrClosed. It does
// not close the client the store was given.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeNotify()
	return nil
}

func (s *Store) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return nil
}

// run calls fn and returns by ctx's deadline, with an error that errors.Is
// matches against the context's error. A call that ctx interrupts may still
// have taken effect on the server.
//
// A cancellation without a deadline stops a call that has not started, not
// one in flight: go-redis cannot abandon a socket read on it, and running
// every call of a request-scoped context in a goroutine of its own would
// cost more than it saves, since the client's read timeout bounds the wait.
func (s *Store) run(ctx context.Context, op string, fn func(context.Context) (any, error)) (any, error) {
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	var (
		reply any
		err   error
	)
	if _, hasDeadline := ctx.Deadline(); hasDeadline && !s.deadlines {
		reply, err = watch(ctx, fn)
	} else {
		// No deadline, or the client itself stops at it.
		reply, err = fn(ctx)
	}
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	// A call that succeeded reports success even when ctx ended meanwhile:
	// the work is done.
	return reply, nil
}

type result struct {
	reply any
	err   error
}

// watch runs fn in its own goroutine so that the caller can return at ctx's
// deadline even though go-redis, not told to honour it, would go on waiting
// for the socket. The abandoned call ends by itself at the client's read
// timeout.
func watch(ctx context.Context, fn func(context.Context) (any, error)) (any, error) {
	ch := make(chan result, 1)
	go func() {
		reply, err := fn(ctx)
		ch <- result{reply, err}
	}()
	select {
	case r := <-ch:
		return r.reply, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // it finished too: keep its answer
			return r.reply, r.err
		default:
			return nil, ctx.Err()
		}
	}
}

func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		// go-redis reports a passed deadline as an i/o timeout: name the
		// context's error so that errors.Is finds it.
		return fmt.Errorf("redisstore: %s: %w: %w", op, cerr, err)
	}
	if s.client.closed(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrClosed, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// micros is d in whole microseconds, the precision records keep, rounded
// up: a lease is never cut short by the rounding.
func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// millis is a lifetime in whole milliseconds, PEXPIRE's unit, rounded up
// so that Redis never drops a record sooner than its lifetime, and at
// least 1 (PEXPIRE 0 deletes the key at once).
func millis(d time.Duration) int64 { return max(int64((d+time.Millisecond-1)/time.Millisecond), 1) }

// legacyVersion names the version of an earlier version's in_progress
// record: its token and lu as stored. Empty for a record on Redis's clock.
type legacyVersion struct{ tok, lu string }

// judge decodes the reply of a script that read the record of keyHash: its
// fields, Redis's clock when it read them and the key's PTTL. It sets
// ReadAt and LeaseLeft as judged on that clock.
//
// A record that an earlier version wrote (no sv field) holds its writer's
// clock in ca, ua, ea and lu, which nothing relates to Redis's. Its
// lifetime is the key's PTTL, which that version set as a duration, so
// ExpiresAt is read from it. Its lease is judged by watching it, as stores
// without a clock do (store/internal/leasewatch): over only once this
// process has seen the very same token and lu, unchanged, for a whole
// lease (lease; 0 means the holder's own span, lu - ua, which is never
// shorter than its lease). A holder that still renews, whatever its clock
// says, changes lu every third of its lease and is never judged stale.
func (s *Store) judge(keyHash string, vals []any, lease time.Duration) (store.Record, legacyVersion, error) {
	var lv legacyVersion
	if len(vals) != len(fields)+2 {
		return store.Record{}, lv, fmt.Errorf("redisstore: record %s: %d values, want %d", keyHash, len(vals), len(fields)+2)
	}
	now, ok1 := vals[len(fields)].(int64)
	pttl, ok2 := vals[len(fields)+1].(int64)
	if !ok1 || !ok2 {
		return store.Record{}, lv, fmt.Errorf("redisstore: record %s: clock %v, pttl %v", keyHash, vals[len(fields)], vals[len(fields)+1])
	}
	r, err := parseRecord(keyHash, vals[:len(fields)])
	if err != nil {
		return store.Record{}, lv, err
	}
	readAt := time.UnixMicro(now).UTC()
	if vals[len(fields)-1] != nil { // sv: on Redis's clock
		r.SetReadAt(readAt)
		return r, lv, nil
	}
	if pttl >= 0 {
		r.ExpiresAt = readAt.Add(time.Duration(pttl) * time.Millisecond)
	}
	r.SetReadAt(readAt)
	if r.State == store.InProgress {
		if lease <= 0 {
			lease = max(r.LeaseUntil.Sub(r.UpdatedAt), 0)
		}
		lv.tok, _ = vals[1].(string)
		lv.lu, _ = vals[10].(string)
		r.LeaseLeft = s.watch.Left(keyHash, lv.tok+"@"+lv.lu, lease)
		// For display, on Redis's clock like ReadAt.
		r.LeaseUntil = readAt.Add(r.LeaseLeft)
	}
	return r, lv, nil
}

// parseRecord decodes the fields of a record, laid out as fields.
func parseRecord(keyHash string, vals []any) (store.Record, error) {
	if len(vals) != len(fields) {
		return store.Record{}, fmt.Errorf("redisstore: record %s: %d fields, want %d", keyHash, len(vals), len(fields))
	}
	str := func(i int) string { s, _ := vals[i].(string); return s }
	var perr error
	when := func(i int) time.Time {
		n, err := strconv.ParseInt(str(i), 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("redisstore: record %s: field %s: %w", keyHash, fields[i], err)
		}
		return time.UnixMicro(n).UTC()
	}
	tok, err := strconv.ParseUint(str(1), 10, 64)
	if err != nil {
		return store.Record{}, fmt.Errorf("redisstore: record %s: token: %w", keyHash, err)
	}
	r := store.Record{
		KeyHash:     keyHash,
		State:       store.State(str(0)),
		Token:       tok,
		Fingerprint: str(2),
		Binding:     str(3),
		Scope:       str(4),
		Key:         str(5),
		RequestID:   str(6),
		CreatedAt:   when(7),
		UpdatedAt:   when(8),
		ExpiresAt:   when(9),
		LeaseUntil:  when(10),
	}
	if v, ok := vals[11].(string); ok {
		r.Value = []byte(v)
	}
	if perr != nil {
		return store.Record{}, perr
	}
	if !r.State.Valid() {
		return store.Record{}, fmt.Errorf("redisstore: record %s: invalid state %q", keyHash, r.State)
	}
	return r, nil
}
