package s3store_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
	"github.com/idem-dev/idem/store/storetest"
)

// TestExpiryOnServerClock: a record lives its TTL from its write on the
// server's clock, judged by the Date of the answer that reads it. The
// Date has whole seconds, so the record is kept through the second that
// cannot be told apart from its expiry: never gone before it, at most a
// second after.
func TestExpiryOnServerClock(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	clock := newFrozenClock(seedNow)
	s := clockStore(t, srv, clock)
	ctx := context.Background()
	req := storetest.FreshRequest()
	mustAcquire(t, s, req)
	clock.add(10 * time.Second)
	if err := s.Complete(ctx, completion(req, "v")); err != nil {
		t.Fatal(err)
	}
	written := seedNow.Add(10 * time.Second)
	for _, tc := range []struct {
		after time.Duration
		live  bool
	}{
		{0, true},
		{time.Hour - time.Second, true},
		{time.Hour, true}, // the Date's second of precision
		{time.Hour + time.Second, false},
	} {
		clock.set(written.Add(tc.after))
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		switch {
		case tc.live && err != nil:
			t.Fatalf("%v after the write: %v, want the record", tc.after, err)
		case tc.live && (!r.ExpiresAt.Equal(written.Add(time.Hour)) || !r.UpdatedAt.Equal(written) || !r.ReadAt.Equal(written.Add(tc.after))):
			t.Fatalf("%v after the write: expires %v, updated %v, read %v", tc.after, r.ExpiresAt, r.UpdatedAt, r.ReadAt)
		case !tc.live && !errors.Is(err, store.ErrNotFound):
			t.Fatalf("%v after the write: %+v, %v; want ErrNotFound", tc.after, r, err)
		}
	}
	// Reserve judges alike: over the record in its last second, then
	// replacing it (no takeover: it is absent to every reader).
	clock.set(written.Add(time.Hour))
	if res := reserve(t, s, storetest.Taker(req)); res.Acquired || res.Existing.State != store.Succeeded {
		t.Fatalf("reserve in the record's last second: %+v", res)
	}
	clock.set(written.Add(time.Hour + time.Second))
	if res := reserve(t, s, storetest.Taker(req)); !res.Acquired || res.TookOver {
		t.Fatalf("reserve after the record expired: %+v", res)
	}
}

// TestRenewKeepsExpiry: a renewal rewrites the object (a new
// Last-Modified) but keeps the reservation's expiry, for every reader: a
// lease never keeps a record past its lifetime.
func TestRenewKeepsExpiry(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	clock := newFrozenClock(seedNow)
	a := clockStore(t, srv, clock)
	b := sibling(t, a, srv.clockClient(clock, nil))
	ctx := context.Background()
	req := storetest.FreshRequest()
	mustAcquire(t, a, req)
	for range 2 {
		clock.add(20 * time.Minute)
		if err := a.Renew(ctx, storetest.FenceOf(req), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	end := seedNow.Add(time.Hour)
	for _, s := range []*s3store.Store{a, b} {
		r := get(t, s, req)
		if !r.ExpiresAt.Equal(end) || !r.CreatedAt.Equal(seedNow) || !r.UpdatedAt.Equal(seedNow.Add(40*time.Minute)) {
			t.Fatalf("after renewals: created %v, updated %v, expires %v; want %v, +40m, %v", r.CreatedAt, r.UpdatedAt, r.ExpiresAt, seedNow, end)
		}
	}
	clock.set(end)
	get(t, b, req)
	clock.set(end.Add(time.Second))
	wantGone(t, b, req)
	wantGone(t, a, req)
}

// TestRenewRestartsWatch: a would-be taker counts the holder's lease from
// when it first saw the holder's latest version; a renewal, even with the
// same lease in the same second, is a new version (a new ETag: S3's is
// the MD5 of the body, so every renewal writes new bytes) and starts the
// count again. Only a lease watched with no change makes the record stale.
func TestRenewRestartsWatch(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	// A server clock that stands still: the times written for display do
	// not change from one renewal to the next.
	clock := newFrozenClock(seedNow)
	a := clockStore(t, srv, clock)
	b := sibling(t, a, srv.clockClient(clock, nil))
	watch := watched(b)
	req := storetest.FreshRequest()
	mustAcquire(t, a, req)
	key := a.ObjectKey(req.Record.Scope, req.Record.KeyHash)
	if r := get(t, b, req); r.LeaseLeft != time.Minute {
		t.Fatalf("first sighting: lease left %v, want the holder's lease", r.LeaseLeft)
	}
	etags := map[string]bool{etagOf(t, srv, key): true}
	for i := range 3 {
		watch.step(50 * time.Second)
		if r := get(t, b, req); r.LeaseLeft != 10*time.Second {
			t.Fatalf("renewal %d: after 50 s watched: lease left %v, want 10s", i, r.LeaseLeft)
		}
		if err := a.Renew(ctx, storetest.FenceOf(req), time.Minute); err != nil {
			t.Fatal(err)
		}
		etag := etagOf(t, srv, key)
		if etags[etag] {
			t.Fatalf("renewal %d wrote an ETag seen before, %s: watchers would not see it", i, etag)
		}
		etags[etag] = true
		if r := get(t, b, req); r.LeaseLeft != time.Minute {
			t.Fatalf("renewal %d: lease left %v, want the whole lease again", i, r.LeaseLeft)
		}
	}
	watch.step(59 * time.Second)
	if res := reserve(t, b, storetest.Taker(req)); res.Acquired || res.Existing.Stale() {
		t.Fatalf("a second before the renewed lease ends: %+v", res)
	}
	watch.step(time.Second)
	if res := reserve(t, b, storetest.Taker(req)); !res.TookOver {
		t.Fatalf("a whole lease after the renewal: %+v, want a takeover", res)
	}
	if err := a.Renew(ctx, storetest.FenceOf(req), time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal: %v", err)
	}
}

// TestTakeoverLosesToRenewal: the taker has watched the holder's version
// for a lease, but the holder renews just before the takeover's write
// lands. The write is conditional on the version watched, so the server
// refuses it; the taker reads the renewal, starts watching it, and reports
// the holder's live record.
func TestTakeoverLosesToRenewal(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	f, b := faultyStore(t, srv)
	a := sibling(t, b, srv.client(nil))
	req := storetest.FreshRequest()
	mustAcquire(t, a, req)
	watchOver(t, b, watched(b), req)
	f.add(&rule{match: ifMatch, times: 1, before: func(*http.Request) {
		if err := a.Renew(ctx, storetest.FenceOf(req), time.Minute); err != nil {
			t.Errorf("the holder's renewal: %v", err)
		}
	}})
	res := reserve(t, b, storetest.Taker(req))
	if res.Acquired || res.Existing.Token != req.Record.Token || res.Existing.Stale() {
		t.Fatalf("takeover racing a renewal: %+v; want the holder's live record", res)
	}
	if err := a.Complete(ctx, completion(req, "mine")); err != nil {
		t.Fatalf("the holder's completion: %v", err)
	}
}

// TestTornReadNotExpired: a read racing a write may get the Last-Modified
// of the version before with the new version's ETag and body (versitygw
// looks them up one after the other). When the version before had
// expired, the fresh record looks expired too. The store confirms an
// expired verdict with a second read before it treats the record as
// absent, so it neither replaces the new holder's record nor reports it
// gone.
func TestTornReadNotExpired(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	clock := newFrozenClock(seedNow)
	a := clockStore(t, srv, clock)
	f := &faults{}
	b := sibling(t, a, srv.clockClient(clock, f))
	old := storetest.FreshRequest()
	mustAcquire(t, a, old)
	clock.add(2 * time.Hour)
	fresh := storetest.Taker(old)
	if res := reserve(t, a, fresh); !res.Acquired || res.TookOver {
		t.Fatalf("reserve over the expired record: %+v", res)
	}
	// The old version's Last-Modified, as a torn read gives it.
	torn := func() *rule {
		return f.add(&rule{match: isGet, times: 1, modify: func(r *http.Response) {
			r.Header.Set("Last-Modified", seedNow.Format(http.TimeFormat))
		}})
	}
	tr := torn()
	other := storetest.Taker(fresh)
	if res := reserve(t, b, other); res.Acquired || res.Existing.Token != fresh.Record.Token {
		t.Fatalf("reserve after a torn read: %+v; want the fresh holder's record", res)
	}
	if f.hits(tr) != 1 {
		t.Fatal("no torn read was served")
	}
	tr = torn()
	if r := get(t, b, fresh); r.Token != fresh.Record.Token || !r.UpdatedAt.Equal(seedNow.Add(2*time.Hour)) {
		t.Fatalf("Get after a torn read: %+v", r)
	}
	if f.hits(tr) != 1 {
		t.Fatal("no torn read was served")
	}
}

func etagOf(t *testing.T, srv *server, key string) string {
	t.Helper()
	out, err := srv.client(nil).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &srv.bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.ETag)
}

// putOld writes req's record in the old format through c, as an old
// writer whose clock read writer did: created and updated then, the
// given lease and TTL as absolute times from it.
func putOld(t *testing.T, c *s3.Client, s *s3store.Store, req store.ReserveRequest, state store.State, writer time.Time, lease, ttl time.Duration) {
	t.Helper()
	// The old format, field by field: absolute times from the writer's own
	// clock, no ttl or lease.
	o := map[string]any{
		"version": 1, "key": req.Record.Key, "key_hash": "sha256:" + req.Record.KeyHash, "scope": req.Record.Scope,
		"state": string(state), "token": strconv.FormatUint(req.Record.Token, 10), "input_hash": req.Record.Fingerprint,
		"created_at": writer, "updated_at": writer, "expires_at": writer.Add(ttl), "lease_until": writer.Add(lease),
	}
	for k, v := range map[string]string{"binding": req.Record.Binding, "request_id": req.Record.RequestID} {
		if v != "" {
			o[k] = v
		}
	}
	if state != store.InProgress {
		o["value"] = []byte("old outcome")
	}
	body, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	key := s.ObjectKey(req.Record.Scope, req.Record.KeyHash)
	_, err = c.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(s.Options().Bucket), Key: &key, Body: strings.NewReader(string(body) + "\n"),
		ContentType: aws.String("application/json"),
		Metadata:    map[string]string{"idem-expires-at": writer.Add(ttl).Format(time.RFC3339Nano)},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOldFormatObjects: objects written before durations were stored are
// judged on the server's clock and this client's watch, whatever the
// clock of the process that wrote them said. Their TTL is expires_at -
// updated_at from their Last-Modified; their lease, lease_until -
// updated_at, watched like any other.
func TestOldFormatObjects(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	clock := newFrozenClock(seedNow)
	c := srv.clockClient(clock, nil)
	s := newStore(t, srv, c)
	watch := watched(s)
	behind := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) // a writer 6 years behind
	ahead := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)  // and one 10 years ahead

	// Completed, from the writer behind, TTL one hour: the old code
	// judged it expired years ago on any reader with a right clock.
	done := storetest.FreshRequest()
	putOld(t, c, s, done, store.Succeeded, behind, time.Minute, time.Hour)
	// Completed, from the writer ahead, TTL three hours: the old code kept
	// it 10 years.
	doneAhead := storetest.FreshRequest()
	putOld(t, c, s, doneAhead, store.Succeeded, ahead, time.Minute, 3*time.Hour)
	// In progress, lease 30 s, from the writer ahead: the old code never
	// judged it stale on a reader with a right clock.
	held := storetest.FreshRequest()
	held.Lease = 30 * time.Second
	putOld(t, c, s, held, store.InProgress, ahead, 30*time.Second, time.Hour)
	// In progress with a lease_until not after its updated_at: a minute,
	// the engine's default lease.
	odd := storetest.FreshRequest()
	putOld(t, c, s, odd, store.InProgress, behind, -time.Second, time.Hour)

	clock.add(59 * time.Minute)
	r := get(t, s, done)
	if r.State != store.Succeeded || string(r.Value) != "old outcome" || !r.ExpiresAt.Equal(seedNow.Add(time.Hour)) || !r.UpdatedAt.Equal(seedNow) {
		t.Fatalf("the old record from a writer behind: %+v", r)
	}
	if res := reserve(t, s, storetest.Taker(done)); res.Acquired || string(res.Existing.Value) != "old outcome" {
		t.Fatalf("reserve over the old record: %+v, want its outcome", res)
	}

	// Leases: watched from the first read, for the lease the times say.
	for _, tc := range []struct {
		req   store.ReserveRequest
		lease time.Duration
	}{{held, 30 * time.Second}, {odd, time.Minute}} {
		if r := get(t, s, tc.req); r.LeaseLeft != tc.lease {
			t.Fatalf("old in_progress record: lease left %v, want %v", r.LeaseLeft, tc.lease)
		}
	}
	// The takers' records outlive what Cleanup is checked on below.
	longTaker := func(req store.ReserveRequest) store.ReserveRequest {
		tk := storetest.Taker(req)
		tk.TTL = 24 * time.Hour
		return tk
	}
	watch.step(30*time.Second - time.Millisecond)
	if res := reserve(t, s, longTaker(held)); res.Acquired {
		t.Fatalf("old record taken over before its lease was watched: %+v", res)
	}
	watch.step(time.Millisecond)
	if res := reserve(t, s, longTaker(held)); !res.TookOver {
		t.Fatalf("old record after its lease: %+v, want a takeover", res)
	}
	if res := reserve(t, s, longTaker(odd)); res.Acquired {
		t.Fatalf("old record with no lease of its own taken over after 30 s: %+v", res)
	}
	watch.step(30 * time.Second)
	if res := reserve(t, s, longTaker(odd)); !res.TookOver {
		t.Fatalf("old record with no lease of its own after a minute: %+v, want a takeover", res)
	}
	// The taker writes the new format.
	if _, body := rawObject(t, srv, s.ObjectKey(held.Record.Scope, held.Record.KeyHash)); !strings.Contains(string(body), `"lease": "30s"`) {
		t.Fatalf("the taker's object:\n%s", body)
	}

	// Expiry, and Cleanup, on the server's clock: the record from the
	// writer behind goes an hour after its write, the one from the writer
	// ahead three hours after.
	clock.set(seedNow.Add(time.Hour + time.Second))
	wantGone(t, s, done)
	get(t, s, doneAhead)
	clock.set(seedNow.Add(2 * time.Hour))
	n, err := s.Cleanup(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup: %d, %v; want the one old record expired", n, err)
	}
	if r := get(t, s, doneAhead); string(r.Value) != "old outcome" {
		t.Fatalf("the live old record after Cleanup: %+v", r)
	}
	clock.set(seedNow.Add(3*time.Hour + time.Second))
	wantGone(t, s, doneAhead)
	if res := reserve(t, s, storetest.Taker(done)); !res.Acquired || res.TookOver {
		t.Fatalf("reserve over the expired old record: %+v", res)
	}
}
