// Package storetest is the conformance suite that every idem store passes.
//
// A store's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) store.Store { return memory.New() },
//		})
//	}
//
// Stores judge leases and expiry on their own clocks (store/doc.go), so the
// suite sends durations and waits out the short ones; see longLease.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// Harness tells the suite how to make stores.
type Harness struct {
	// New returns a new, empty store. It registers its own cleanup with
	// t.Cleanup; the suite closes the store itself when a test ends.
	New func(t *testing.T) store.Store

	// Peer, when not nil, returns a second, independent client of the same
	// backend as s (another connection pool), so that races are run across
	// clients as they are across processes. Stores that a single process
	// owns leave it nil.
	Peer func(t *testing.T, s store.Store) store.Store

	// IndexKeys, when not nil, returns every key of the backend's primary
	// index for the store s, so the suite can check that raw keys are never
	// indexed.
	IndexKeys func(t *testing.T, s store.Store) []string

	// Racers is the number of goroutines racing on one key; 0 means 128.
	Racers int

	// NativeExpiry declares that the backend expires records itself (Redis
	// TTLs) and that Cleanup has nothing to remove. The suite then checks
	// that expired records are absent and live ones untouched, but not the
	// count Cleanup reports.
	NativeExpiry bool

	// MaxValue, when not 0, is the largest value the store keeps whole
	// (DynamoDB's items are at most 400 KB): LargeValue round-trips a
	// value of that size instead of 4 MiB. What the store does with a
	// larger value is for its own tests to show.
	MaxValue int

	// Resolution is the coarsest step of the clock the store judges
	// expiry on (the HTTP Date of an S3 server: a second); 0 means a
	// millisecond. Lifetimes the suite waits out are made longer than it.
	Resolution time.Duration

	// UnconditionalDeletes declares that the backend ignores conditions
	// on deletes (gofakes3 ignores If-Match on DeleteObject), so that a
	// Release racing a takeover may delete the new holder's record. The
	// Linearizable case then releases only failed records, which nothing
	// else changes.
	UnconditionalDeletes bool
}

// The suite judges time as the stores do, on their own clocks: it sends
// durations and waits them out. Leases and lifetimes that must not pass
// during a test are long (longLease, longTTL); those that must pass are
// short and waited for with generous deadlines, so that a loaded machine
// only makes a test slower, never wrong.
const (
	longLease  = time.Minute
	longTTL    = time.Hour
	shortLease = 300 * time.Millisecond
)

// shortTTL is a lifetime the suite waits out: 300 ms, or three steps of
// the store's clock if that is longer.
func (h Harness) shortTTL() time.Duration { return max(300*time.Millisecond, 3*h.resolution()) }

func (h Harness) resolution() time.Duration {
	if h.Resolution > 0 {
		return h.Resolution
	}
	return time.Millisecond
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	if h.Racers == 0 {
		h.Racers = 128
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ReserveAbsent", testReserveAbsent},
		{"ReserveExisting", testReserveExisting},
		{"ReserveRace", testReserveRace},
		{"ReserveRaceManyKeys", testReserveRaceManyKeys},
		{"Complete", testComplete},
		{"Fail", testFail},
		{"Release", testRelease},
		{"ReleaseFailed", testReleaseFailed},
		{"Renew", testRenew},
		{"StaleTakeover", testStaleTakeover},
		{"StaleTakeoverRace", testStaleTakeoverRace},
		{"FencingStaleHolder", testFencingStaleHolder},
		{"TTL", testTTL},
		{"Cleanup", testCleanup},
		{"CleanupLimit", testCleanupLimit},
		{"LargeValue", testLargeValue},
		{"EmptyAndBinaryValue", testBinaryValue},
		{"ContextCanceled", testContextCanceled},
		{"KeyNotIndexed", testKeyNotIndexed},
		{"Isolation", testIsolation},
		{"Close", testClose},
		{"Notifier", testNotifier},
		{"EnginePausedHolder", testPausedHolder},
		{"EngineOutcomeUnknown", testOutcomeUnknown},
		{"EngineClockSkew", testClockSkew},
		{"EngineDeadHolderSkew", testDeadHolderSkew},
		{"Linearizable", testLinearizable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func newStore(t *testing.T, h Harness) store.Store {
	t.Helper()
	s := h.New(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var tokenSeq atomic.Uint64

func newToken() uint64 { return tokenSeq.Add(1)<<20 | mrand.Uint64N(1<<20) }

// request returns a reservation for key in scope "test", with a lease of
// a minute and a lifetime of an hour: neither passes during a test.
func request(key string) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash:     store.HashKey("test", key),
			Scope:       "test",
			Key:         key,
			Fingerprint: "sha256:fp-" + key,
			Binding:     "POST /charges",
			State:       store.InProgress,
			Token:       newToken(),
			RequestID:   "req-" + key,
		},
		Lease:         longLease,
		TTL:           longTTL,
		TakeOverStale: true,
	}
}

// leased returns request(key) with the lease lease.
func leased(key string, lease time.Duration) store.ReserveRequest {
	r := request(key)
	r.Lease = lease
	return r
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), tokenSeq.Add(1))
}

func mustReserve(t *testing.T, s store.Store, req store.ReserveRequest) {
	t.Helper()
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if !res.Acquired {
		t.Fatalf("Reserve: not acquired; existing %+v", res.Existing)
	}
}

func fence(req store.ReserveRequest) store.Fence {
	return store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token}
}

func complete(req store.ReserveRequest, state store.State, value []byte) store.Completion {
	return store.Completion{Fence: fence(req), State: state, Value: value, TTL: longTTL}
}

func mustGet(t *testing.T, s store.Store, req store.ReserveRequest) store.Record {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

func wantNotFound(t *testing.T, s store.Store, req store.ReserveRequest) {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: got %+v, %v; want ErrNotFound", r, err)
	}
}

// eventually calls cond every step until it reports true, and fails the
// test after within. Waits are generous: a loaded machine makes a test
// slower, not wrong.
func eventually(t *testing.T, within, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
		time.Sleep(step)
	}
}

// waitStale reads the record of req through s until s judges its lease
// over. A store that has no clock watches the record's version from the
// first read (store/doc.go), so the first read starts its count.
func waitStale(t *testing.T, s store.Store, req store.ReserveRequest) store.Record {
	t.Helper()
	var rec store.Record
	eventually(t, 20*req.Lease+10*time.Second, req.Lease/4, "lease over", func() bool {
		rec = mustGet(t, s, req)
		return rec.Stale()
	})
	return rec
}

// waitGone waits until req's record has expired for s.
func waitGone(t *testing.T, s store.Store, req store.ReserveRequest, ttl time.Duration) {
	t.Helper()
	eventually(t, 20*ttl+10*time.Second, ttl/4, "record expired", func() bool {
		_, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
		return err != nil
	})
}

// checkRecord compares what the caller chose of a record (identity,
// state, token, value, request ID); the times are the store's, checked by
// checkTimes.
func checkRecord(t *testing.T, got, want store.Record) {
	t.Helper()
	var diffs []string
	eq := func(name string, ok bool, g, w any) {
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", name, g, w))
		}
	}
	eq("KeyHash", got.KeyHash == want.KeyHash, got.KeyHash, want.KeyHash)
	eq("Scope", got.Scope == want.Scope, got.Scope, want.Scope)
	eq("Key", got.Key == want.Key, got.Key, want.Key)
	eq("Fingerprint", got.Fingerprint == want.Fingerprint, got.Fingerprint, want.Fingerprint)
	eq("Binding", got.Binding == want.Binding, got.Binding, want.Binding)
	eq("State", got.State == want.State, got.State, want.State)
	eq("Token", got.Token == want.Token, got.Token, want.Token)
	eq("Value", bytes.Equal(got.Value, want.Value), len(got.Value), len(want.Value))
	eq("RequestID", got.RequestID == want.RequestID, got.RequestID, want.RequestID)
	if len(diffs) > 0 {
		t.Fatalf("record differs:\n  %s", strings.Join(diffs, "\n  "))
	}
}

// checkTimes checks the times a store set on a record it read: all on one
// clock, ReadAt after the record was written, the lifetime and lease as
// sent, and a live in_progress record's lease not over.
func checkTimes(t *testing.T, h Harness, r store.Record, lease, ttl time.Duration) {
	t.Helper()
	slack := 2 * h.resolution()
	switch {
	case r.ReadAt.IsZero() || r.CreatedAt.IsZero() || r.UpdatedAt.IsZero():
		t.Fatalf("times not set: %+v", r)
	case r.ReadAt.Before(r.UpdatedAt.Add(-slack)) || r.UpdatedAt.Before(r.CreatedAt.Add(-slack)):
		t.Fatalf("times out of order: created %v, updated %v, read %v", r.CreatedAt, r.UpdatedAt, r.ReadAt)
	case absDiff(r.ExpiresAt.Sub(r.UpdatedAt), ttl) > slack:
		t.Fatalf("expires %v after its update, want %v", r.ExpiresAt.Sub(r.UpdatedAt), ttl)
	case r.State == store.InProgress && (r.LeaseLeft <= 0 || r.LeaseLeft > lease+slack):
		t.Fatalf("lease left %v of %v", r.LeaseLeft, lease)
	case r.State != store.InProgress && r.Stale():
		t.Fatalf("a %s record is stale", r.State)
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

func testReserveAbsent(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t))
	wantNotFound(t, s, req)
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("got %+v, want acquired without takeover", res)
	}
	got := mustGet(t, s, req)
	checkRecord(t, got, req.Record)
	checkTimes(t, h, got, req.Lease, req.TTL)
	if !got.CreatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("a new record: created %v, updated %v", got.CreatedAt, got.UpdatedAt)
	}
}

func testReserveExisting(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	// Same key again, live lease, with and without a different fingerprint:
	// the store hands back the holder's record and acquires nothing.
	for _, fp := range []string{req.Record.Fingerprint, "sha256:other"} {
		again := request(req.Record.Key)
		again.Record.Fingerprint = fp
		res, err := s.Reserve(context.Background(), again)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("second reserve acquired a held key (fingerprint %s)", fp)
		}
		checkRecord(t, res.Existing, req.Record)
		checkTimes(t, h, res.Existing, req.Lease, req.TTL)
	}
	// A completed record is handed back too, with its value.
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, []byte("v1"))); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(context.Background(), request(req.Record.Key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "v1" {
		t.Fatalf("reserve over a succeeded record: got %+v", res)
	}
	checkTimes(t, h, res.Existing, req.Lease, longTTL)
}

// race has n goroutines reserve the same key through the clients and returns
// how many acquired it.
func race(t *testing.T, clients []store.Store, key string, n int) (winners int, tokens map[uint64]int) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		errs  []error
	)
	tokens = make(map[uint64]int)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(key)
			<-start
			res, err := clients[i%len(clients)].Reserve(context.Background(), req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case res.Acquired:
				winners++
				tokens[req.Record.Token]++
			default:
				tokens[res.Existing.Token]++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d reserves failed, first: %v", len(errs), errs[0])
	}
	return winners, tokens
}

func clients(t *testing.T, h Harness, s store.Store) []store.Store {
	cs := []store.Store{s}
	if h.Peer != nil {
		p := h.Peer(t, s)
		t.Cleanup(func() { _ = p.Close() })
		cs = append(cs, p)
	}
	return cs
}

func testReserveRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	for round := range 5 {
		key := uniqueKey(t)
		winners, tokens := race(t, cs, key, h.Racers)
		if winners != 1 {
			t.Fatalf("round %d: %d of %d racers acquired the key, want exactly 1", round, winners, h.Racers)
		}
		// Every loser saw the winner's record, not some other token.
		if len(tokens) != 1 {
			t.Fatalf("round %d: racers saw %d different tokens, want 1", round, len(tokens))
		}
	}
}

func testReserveRaceManyKeys(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	const keys, perKey = 32, 8
	base := uniqueKey(t)
	var acquired [keys]atomic.Int32
	var failed atomic.Int32
	var wg sync.WaitGroup
	for i := range keys * perKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % keys
			req := request(fmt.Sprintf("%s-%d", base, k))
			res, err := cs[i%len(cs)].Reserve(context.Background(), req)
			if err != nil {
				failed.Add(1)
				return
			}
			if res.Acquired {
				acquired[k].Add(1)
				if err := cs[i%len(cs)].Complete(context.Background(), complete(req, store.Succeeded, []byte(req.Record.Key))); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d operations failed", n)
	}
	for k := range keys {
		if n := acquired[k].Load(); n != 1 {
			t.Errorf("key %d acquired %d times, want 1", k, n)
		}
	}
}

func testComplete(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	reserved := mustGet(t, s, req)

	wrong := complete(req, store.Succeeded, []byte("intruder"))
	wrong.Token++
	if err := s.Complete(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete with a wrong token: %v, want ErrLeaseLost", err)
	}
	c := complete(req, store.Succeeded, []byte(`{"id":"ch_1"}`))
	c.TTL = 2 * longTTL
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := req.Record
	want.State, want.Value = store.Succeeded, c.Value
	got := mustGet(t, s, req)
	checkRecord(t, got, want)
	checkTimes(t, h, got, 0, c.TTL)
	if !got.CreatedAt.Equal(reserved.CreatedAt) || got.UpdatedAt.Before(reserved.UpdatedAt) {
		t.Fatalf("completion moved the creation (%v to %v) or went back in time (updated %v to %v)",
			reserved.CreatedAt, got.CreatedAt, reserved.UpdatedAt, got.UpdatedAt)
	}

	// A completed record cannot be completed, renewed or released again.
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("late"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew after Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release after Complete: %v, want ErrLeaseLost", err)
	}
	checkRecord(t, mustGet(t, s, req), want)
	// Completing an absent key is a lost lease, not a creation.
	ghost := request(uniqueKey(t))
	if err := s.Complete(ctx, complete(ghost, store.Succeeded, nil)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete of an absent key: %v, want ErrLeaseLost", err)
	}
	wantNotFound(t, s, ghost)
}

func testFail(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)
	c := complete(req, store.Failed, []byte("card_declined"))
	if err := s.Complete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req)
	if got.State != store.Failed || string(got.Value) != "card_declined" {
		t.Fatalf("got %s %q, want failed card_declined", got.State, got.Value)
	}
	// A failed record is not stale, whatever its lease said.
	time.Sleep(2 * shortLease)
	for range 2 { // a store without a clock starts watching at the first read
		res, err := s.Reserve(context.Background(), request(req.Record.Key))
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired || res.Existing.State != store.Failed || res.Existing.Stale() {
			t.Fatalf("reserve over a failed record: %+v", res)
		}
		time.Sleep(2 * shortLease)
	}
}

// testReleaseFailed: a failed record is released by its token (an operator
// frees a key whose outcome is unknown); a succeeded one never is.
func testReleaseFailed(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("upstream timeout"))); err != nil {
		t.Fatal(err)
	}
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a failed record with a wrong token: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew of a failed record: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatalf("Release of a failed record: %v", err)
	}
	wantNotFound(t, s, req)
	mustReserve(t, s, request(req.Record.Key))

	ok := request(uniqueKey(t))
	mustReserve(t, s, ok)
	c := complete(ok, store.Succeeded, []byte(`{"id":"ch_1"}`))
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, fence(ok)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a succeeded record: %v, want ErrLeaseLost", err)
	}
	if got := mustGet(t, s, ok); got.State != store.Succeeded {
		t.Fatalf("succeeded record after Release: %s", got.State)
	}
}

func testRelease(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release with a wrong token: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, s, req)
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Release: %v, want ErrLeaseLost", err)
	}
	// The key can be reserved again, by anybody.
	again := request(req.Record.Key)
	again.Record.Fingerprint = "sha256:another"
	mustReserve(t, s, again)
}

// testRenew: a lease renewed before it ends is never judged over, by any
// client, however long the holder runs; once renewals stop, it ends.
func testRenew(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	ctx := context.Background()
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Renew(ctx, wrong, longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew with a wrong token: %v, want ErrLeaseLost", err)
	}
	// Renewed with a long lease: live for every client, however many
	// short leases pass.
	if err := s.Renew(ctx, fence(req), longLease); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(shortLease)
		for _, c := range cs {
			res, err := c.Reserve(ctx, request(req.Record.Key))
			if err != nil {
				t.Fatal(err)
			}
			if res.Acquired {
				t.Fatal("a renewed lease was taken over")
			}
			if res.Existing.Token != req.Record.Token || res.Existing.LeaseLeft <= shortLease {
				t.Fatalf("existing token %d (want %d), lease left %v", res.Existing.Token, req.Record.Token, res.Existing.LeaseLeft)
			}
		}
	}
	// Renewed with a short lease and left: the lease ends.
	if err := s.Renew(ctx, fence(req), shortLease); err != nil {
		t.Fatal(err)
	}
	if got := waitStale(t, cs[len(cs)-1], leased(req.Record.Key, shortLease)); got.Token != req.Record.Token {
		t.Fatalf("stale record's token %d, want %d", got.Token, req.Record.Token)
	}
}

func testStaleTakeover(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)

	// Not stale yet (a long lease this time): no takeover.
	live := request(uniqueKey(t))
	mustReserve(t, s, live)
	res, err := s.Reserve(ctx, request(live.Record.Key))
	if err != nil || res.Acquired {
		t.Fatalf("takeover of a live lease: %+v, %v", res, err)
	}
	waitStale(t, s, req)
	// Stale, but the request forbids takeover, or differs in fingerprint or
	// binding: no takeover either.
	noTake := request(req.Record.Key)
	noTake.TakeOverStale = false
	otherFP := request(req.Record.Key)
	otherFP.Record.Fingerprint = "sha256:different"
	otherBinding := request(req.Record.Key)
	otherBinding.Record.Binding = "POST /refunds"
	for name, r := range map[string]store.ReserveRequest{"no takeover": noTake, "fingerprint": otherFP, "binding": otherBinding} {
		res, err := s.Reserve(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("%s: stale record taken over", name)
		}
		if res.Existing.State != store.InProgress || res.Existing.Token != req.Record.Token || !res.Existing.Stale() {
			t.Fatalf("%s: existing %+v", name, res.Existing)
		}
	}
	// Stale and matching: taken over with the new token and its lease.
	taker := request(req.Record.Key)
	res, err = s.Reserve(ctx, taker)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || !res.TookOver {
		t.Fatalf("stale takeover: %+v", res)
	}
	got := mustGet(t, s, req)
	if got.Token != taker.Record.Token || got.State != store.InProgress || got.Stale() {
		t.Fatalf("after takeover: %+v", got)
	}
	checkTimes(t, h, got, taker.Lease, taker.TTL)
}

func testStaleTakeoverRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	key := uniqueKey(t)
	held := leased(key, shortLease)
	mustReserve(t, s, held)
	for _, c := range cs {
		waitStale(t, c, held)
	}
	winners, _ := race(t, cs, key, h.Racers)
	if winners != 1 {
		t.Fatalf("%d racers took over the stale record, want exactly 1", winners)
	}
}

func testFencingStaleHolder(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	old := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, old)
	waitStale(t, s, old)
	taker := leased(old.Record.Key, longLease)
	taker.TTL = h.shortTTL()
	mustReserve(t, s, taker)

	// The old holder wakes up: every write it tries is fenced off.
	if err := s.Renew(ctx, fence(old), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(old, store.Succeeded, []byte("stale"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v", err)
	}
	if err := s.Release(ctx, fence(old)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Release: %v", err)
	}
	if got := mustGet(t, s, old); got.Token != taker.Record.Token || got.State != store.InProgress {
		t.Fatalf("record after fencing: token %d state %s", got.Token, got.State)
	}

	// The same holds when the record expired and a new caller reused the key:
	// a token never comes back.
	waitGone(t, s, taker, taker.TTL)
	reuse := request(old.Record.Key)
	mustReserve(t, s, reuse)
	if err := s.Complete(ctx, complete(taker, store.Failed, []byte("ghost"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete by the holder of an expired record: %v", err)
	}
	if got := mustGet(t, s, reuse); got.Token != reuse.Record.Token || got.State != store.InProgress {
		t.Fatalf("record after the expired holder's write: %+v", got)
	}
}

func testTTL(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	ttl := h.shortTTL()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	c := complete(req, store.Succeeded, []byte("v"))
	c.TTL = ttl
	// Live until its lifetime has passed on the store's clock, counted
	// from no earlier than the completion was sent: a reader never finds
	// it gone sooner.
	done := time.Now()
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if errors.Is(err, store.ErrNotFound) {
			if lived := time.Since(done); lived < ttl-h.resolution() {
				t.Fatalf("record gone after %v, its lifetime is %v", lived, ttl)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.ExpiresIn() > ttl+h.resolution() {
			t.Fatalf("expires in %v, lifetime %v", r.ExpiresIn(), ttl)
		}
		if time.Since(done) > 20*ttl+10*time.Second {
			t.Fatalf("record still there %v after its lifetime of %v", time.Since(done), ttl)
		}
		time.Sleep(ttl / 10)
	}
	// An expired record is absent to Reserve as well, with any fingerprint.
	later := request(req.Record.Key)
	later.Record.Fingerprint = "sha256:new"
	later.TakeOverStale = false
	res, err := s.Reserve(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("reserve over an expired record: %+v; want acquired, not a takeover", res)
	}
	checkRecord(t, mustGet(t, s, later), later.Record)
}

func testCleanup(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	base := uniqueKey(t)
	ttl := h.shortTTL()
	var live, expired []store.ReserveRequest
	setup := time.Now()
	for i := range 40 {
		req := request(fmt.Sprintf("%s-%d", base, i))
		if i%2 == 0 {
			req.TTL = ttl
			expired = append(expired, req)
		} else {
			req.TTL = 48 * time.Hour
			live = append(live, req)
		}
		mustReserve(t, s, req)
		if i%4 < 2 { // half of each kind completed
			c := complete(req, store.Succeeded, []byte("v"))
			c.TTL = req.TTL
			if err := s.Complete(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing has expired yet, unless writing the records took longer
	// than their lifetime (a loaded machine): then the check says nothing.
	if n, err := s.Cleanup(ctx, 0); err != nil || (n != 0 && !h.NativeExpiry && time.Since(setup) < ttl/2) {
		t.Fatalf("Cleanup before anything expired: %d, %v", n, err)
	}
	for _, r := range expired {
		waitGone(t, s, r, ttl)
	}
	n, err := s.Cleanup(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !h.NativeExpiry && n != len(expired) {
		t.Fatalf("Cleanup removed %d, want %d", n, len(expired))
	}
	for _, r := range live {
		mustGet(t, s, r)
	}
	for _, r := range expired {
		wantNotFound(t, s, r)
	}
	if h.NativeExpiry {
		return
	}
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 0 {
		t.Fatalf("second Cleanup: %d, %v", n, err)
	}
}

func testCleanupLimit(t *testing.T, h Harness) {
	if h.NativeExpiry {
		t.Skip("the backend expires records itself")
	}
	s := newStore(t, h)
	ctx := context.Background()
	base := uniqueKey(t)
	ttl := h.shortTTL()
	var last store.ReserveRequest
	for i := range 25 {
		last = request(fmt.Sprintf("%s-%d", base, i))
		last.TTL = ttl
		mustReserve(t, s, last)
	}
	waitGone(t, s, last, ttl)
	total := 0
	for range 10 {
		n, err := s.Cleanup(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n > 10 {
			t.Fatalf("Cleanup with limit 10 removed %d", n)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 25 {
		t.Fatalf("Cleanup in batches removed %d, want 25", total)
	}
}

func testLargeValue(t *testing.T, h Harness) {
	s := newStore(t, h)
	n := 4<<20 + 17
	if h.MaxValue > 0 {
		n = h.MaxValue
	}
	value := make([]byte, n)
	if _, err := rand.Read(value); err != nil {
		t.Fatal(err)
	}
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, value)); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req)
	if !bytes.Equal(got.Value, value) {
		t.Fatalf("a value of %d bytes differs after a round trip (got %d bytes)", n, len(got.Value))
	}
}

func testBinaryValue(t *testing.T, h Harness) {
	s := newStore(t, h)
	for _, v := range [][]byte{{}, {0, 0xff, '"', '\\', '\n', 0x80}, []byte(`{"a":"ü\u0000"}`)} {
		req := request(uniqueKey(t))
		mustReserve(t, s, req)
		if err := s.Complete(context.Background(), complete(req, store.Succeeded, v)); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, req); !bytes.Equal(got.Value, v) {
			t.Fatalf("value %q came back as %q", v, got.Value)
		}
	}
	// Keys and scopes with any printable text, including quotes, slashes and
	// non-ASCII letters.
	for _, key := range []string{`a"b'c`, "päyment/ü/../x", strings.Repeat("k", 255), "{tag}:x"} {
		req := request(key + uniqueKey(t))
		req.Record.Scope = `tenant "7"/POST /api/x`
		req.Record.KeyHash = store.HashKey(req.Record.Scope, req.Record.Key)
		mustReserve(t, s, req)
		checkRecord(t, mustGet(t, s, req), req.Record)
	}
}

func testContextCanceled(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := request(uniqueKey(t))
	if _, err := s.Reserve(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a canceled context: %v", err)
	}
	wantNotFound(t, s, req)
	mustReserve(t, s, req)
	before := mustGet(t, s, req)
	if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v", err)
	}
	if err := s.Renew(ctx, fence(req), 2*longLease); !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(req, store.Succeeded, []byte("x"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.Cleanup(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Cleanup: %v", err)
	}
	// Nothing above took effect.
	got := mustGet(t, s, req)
	if got.State != store.InProgress || !got.LeaseUntil.Equal(before.LeaseUntil) {
		t.Fatalf("a canceled call changed the record: %+v", got)
	}
	// A deadline that passes while waiting is reported as such.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := s.Reserve(dctx, request(uniqueKey(t))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve past its deadline: %v", err)
	}
}

func testKeyNotIndexed(t *testing.T, h Harness) {
	if h.IndexKeys == nil {
		t.Skip("the harness cannot list the index")
	}
	s := newStore(t, h)
	raw := "raw-key-" + uniqueKey(t)
	req := request(raw)
	mustReserve(t, s, req)
	found := false
	for _, k := range h.IndexKeys(t, s) {
		if strings.Contains(k, raw) {
			t.Fatalf("index key %q contains the raw key", k)
		}
		if strings.Contains(k, req.Record.KeyHash) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no index key holds the key hash %s", req.Record.KeyHash)
	}
}

func testIsolation(t *testing.T, h Harness) {
	s := newStore(t, h)
	// The same client key in two scopes is two records.
	key := uniqueKey(t)
	a, b := request(key), request(key)
	a.Record.Scope, b.Record.Scope = "tenant-a", "tenant-b"
	a.Record.KeyHash, b.Record.KeyHash = store.HashKey("tenant-a", key), store.HashKey("tenant-b", key)
	mustReserve(t, s, a)
	mustReserve(t, s, b)
	if err := s.Complete(context.Background(), complete(a, store.Succeeded, []byte("A"))); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, b); got.State != store.InProgress || len(got.Value) != 0 {
		t.Fatalf("tenant b sees %+v", got)
	}
	// Returned records are copies.
	got := mustGet(t, s, a)
	got.Value[0] = 'X'
	if again := mustGet(t, s, a); string(again.Value) != "A" {
		t.Fatalf("mutating a returned value changed the store: %q", again.Value)
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.New(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(context.Background(), request(uniqueKey(t))); err == nil {
		t.Fatal("Reserve after Close succeeded")
	}
}
