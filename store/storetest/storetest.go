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
// The suite drives the store with explicit times, never the wall clock, so
// lease and TTL behaviour is tested without sleeping.
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
}

// T0 is the suite's clock origin: 2026-01-27 12:00 UTC (seed 004's example).
var T0 = time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)

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

// request returns a reservation for key in scope "test" at now, with a lease
// of one minute and a TTL of one hour.
func request(key string, now time.Time) store.ReserveRequest {
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
			CreatedAt:   now,
			UpdatedAt:   now,
			ExpiresAt:   now.Add(time.Hour),
			LeaseUntil:  now.Add(time.Minute),
		},
		Now:           now,
		TakeOverStale: true,
	}
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

func complete(req store.ReserveRequest, state store.State, value []byte, now time.Time) store.Completion {
	return store.Completion{Fence: fence(req), State: state, Value: value, Now: now, ExpiresAt: now.Add(time.Hour)}
}

func mustGet(t *testing.T, s store.Store, req store.ReserveRequest, now time.Time) store.Record {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash, now)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

func wantNotFound(t *testing.T, s store.Store, req store.ReserveRequest, now time.Time) {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash, now)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: got %+v, %v; want ErrNotFound", r, err)
	}
}

// sameTime compares at millisecond precision, the coarsest any store keeps.
func sameTime(a, b time.Time) bool {
	return a.Truncate(time.Millisecond).Equal(b.Truncate(time.Millisecond))
}

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
	eq("CreatedAt", sameTime(got.CreatedAt, want.CreatedAt), got.CreatedAt, want.CreatedAt)
	eq("UpdatedAt", sameTime(got.UpdatedAt, want.UpdatedAt), got.UpdatedAt, want.UpdatedAt)
	eq("ExpiresAt", sameTime(got.ExpiresAt, want.ExpiresAt), got.ExpiresAt, want.ExpiresAt)
	if want.State == store.InProgress {
		eq("LeaseUntil", sameTime(got.LeaseUntil, want.LeaseUntil), got.LeaseUntil, want.LeaseUntil)
	}
	if len(diffs) > 0 {
		t.Fatalf("record differs:\n  %s", strings.Join(diffs, "\n  "))
	}
}

func testReserveAbsent(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t), T0)
	wantNotFound(t, s, req, T0)
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("got %+v, want acquired without takeover", res)
	}
	checkRecord(t, mustGet(t, s, req, T0), req.Record)
}

func testReserveExisting(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	// Same key again, live lease, with and without a different fingerprint:
	// the store hands back the holder's record and acquires nothing.
	for _, fp := range []string{req.Record.Fingerprint, "sha256:other"} {
		again := request(req.Record.Key, T0.Add(time.Second))
		again.Record.Fingerprint = fp
		res, err := s.Reserve(context.Background(), again)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("second reserve acquired a held key (fingerprint %s)", fp)
		}
		checkRecord(t, res.Existing, req.Record)
	}
	// A completed record is handed back too, with its value.
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, []byte("v1"), T0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(context.Background(), request(req.Record.Key, T0.Add(2*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "v1" {
		t.Fatalf("reserve over a succeeded record: got %+v", res)
	}
}

// race has n goroutines reserve the same key through the clients and returns
// how many acquired it.
func race(t *testing.T, clients []store.Store, key string, n int, now time.Time) (winners int, tokens map[uint64]int) {
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
			req := request(key, now)
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
		winners, tokens := race(t, cs, key, h.Racers, T0)
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
			req := request(fmt.Sprintf("%s-%d", base, k), T0)
			res, err := cs[i%len(cs)].Reserve(context.Background(), req)
			if err != nil {
				failed.Add(1)
				return
			}
			if res.Acquired {
				acquired[k].Add(1)
				if err := cs[i%len(cs)].Complete(context.Background(), complete(req, store.Succeeded, []byte(req.Record.Key), T0)); err != nil {
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
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	done := T0.Add(3 * time.Second)

	wrong := complete(req, store.Succeeded, []byte("intruder"), done)
	wrong.Token++
	if err := s.Complete(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete with a wrong token: %v, want ErrLeaseLost", err)
	}
	c := complete(req, store.Succeeded, []byte(`{"id":"ch_1"}`), done)
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := req.Record
	want.State, want.Value, want.UpdatedAt, want.ExpiresAt = store.Succeeded, c.Value, done, c.ExpiresAt
	checkRecord(t, mustGet(t, s, req, done), want)

	// A completed record cannot be completed, renewed or released again.
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("late"), done)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), done.Add(time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew after Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release after Complete: %v, want ErrLeaseLost", err)
	}
	checkRecord(t, mustGet(t, s, req, done), want)
	// Completing an absent key is a lost lease, not a creation.
	ghost := request(uniqueKey(t), T0)
	if err := s.Complete(ctx, complete(ghost, store.Succeeded, nil, done)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete of an absent key: %v, want ErrLeaseLost", err)
	}
	wantNotFound(t, s, ghost, done)
}

func testFail(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	c := complete(req, store.Failed, []byte("card_declined"), T0.Add(time.Second))
	if err := s.Complete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req, T0.Add(time.Second))
	if got.State != store.Failed || string(got.Value) != "card_declined" {
		t.Fatalf("got %s %q, want failed card_declined", got.State, got.Value)
	}
	// A failed record is not stale, whatever its lease said.
	res, err := s.Reserve(context.Background(), request(req.Record.Key, T0.Add(10*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Existing.State != store.Failed {
		t.Fatalf("reserve over a failed record: %+v", res)
	}
}

// testReleaseFailed: a failed record is released by its token (an operator
// frees a key whose outcome is unknown); a succeeded one never is.
func testReleaseFailed(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	done := T0.Add(time.Second)
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("upstream timeout"), done)); err != nil {
		t.Fatal(err)
	}
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a failed record with a wrong token: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), done.Add(time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew of a failed record: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req, done)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatalf("Release of a failed record: %v", err)
	}
	wantNotFound(t, s, req, done)
	mustReserve(t, s, request(req.Record.Key, done))

	ok := request(uniqueKey(t), T0)
	mustReserve(t, s, ok)
	c := complete(ok, store.Succeeded, []byte(`{"id":"ch_1"}`), done)
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, fence(ok)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a succeeded record: %v, want ErrLeaseLost", err)
	}
	if got := mustGet(t, s, ok, done); got.State != store.Succeeded {
		t.Fatalf("succeeded record after Release: %s", got.State)
	}
}

func testRelease(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release with a wrong token: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req, T0)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, s, req, T0)
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Release: %v, want ErrLeaseLost", err)
	}
	// The key can be reserved again, by anybody.
	again := request(req.Record.Key, T0.Add(time.Second))
	again.Record.Fingerprint = "sha256:another"
	mustReserve(t, s, again)
}

func testRenew(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Renew(ctx, wrong, T0.Add(time.Hour)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew with a wrong token: %v, want ErrLeaseLost", err)
	}
	// Renewed at 50 s to 110 s: at 90 s the holder is alive, so no takeover.
	if err := s.Renew(ctx, fence(req), T0.Add(110*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, req, T0); !sameTime(got.LeaseUntil, T0.Add(110*time.Second)) {
		t.Fatalf("LeaseUntil %v, want %v", got.LeaseUntil, T0.Add(110*time.Second))
	}
	res, err := s.Reserve(ctx, request(req.Record.Key, T0.Add(90*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatal("a renewed lease was taken over")
	}
	if res.Existing.Token != req.Record.Token {
		t.Fatalf("existing token %d, want %d", res.Existing.Token, req.Record.Token)
	}
}

func testStaleTakeover(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	after := T0.Add(2 * time.Minute) // lease was one minute

	// Not stale yet: no takeover.
	res, err := s.Reserve(ctx, request(req.Record.Key, T0.Add(30*time.Second)))
	if err != nil || res.Acquired {
		t.Fatalf("takeover of a live lease: %+v, %v", res, err)
	}
	// Stale, but the request forbids takeover, or differs in fingerprint or
	// binding: no takeover either.
	noTake := request(req.Record.Key, after)
	noTake.TakeOverStale = false
	otherFP := request(req.Record.Key, after)
	otherFP.Record.Fingerprint = "sha256:different"
	otherBinding := request(req.Record.Key, after)
	otherBinding.Record.Binding = "POST /refunds"
	for name, r := range map[string]store.ReserveRequest{"no takeover": noTake, "fingerprint": otherFP, "binding": otherBinding} {
		res, err := s.Reserve(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("%s: stale record taken over", name)
		}
		if res.Existing.State != store.InProgress || res.Existing.Token != req.Record.Token {
			t.Fatalf("%s: existing %+v", name, res.Existing)
		}
	}
	// Stale and matching: taken over with the new token.
	taker := request(req.Record.Key, after)
	res, err = s.Reserve(ctx, taker)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || !res.TookOver {
		t.Fatalf("stale takeover: %+v", res)
	}
	got := mustGet(t, s, req, after)
	if got.Token != taker.Record.Token || got.State != store.InProgress || !sameTime(got.LeaseUntil, taker.Record.LeaseUntil) {
		t.Fatalf("after takeover: %+v", got)
	}
}

func testStaleTakeoverRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	key := uniqueKey(t)
	mustReserve(t, s, request(key, T0))
	winners, _ := race(t, cs, key, h.Racers, T0.Add(5*time.Minute))
	if winners != 1 {
		t.Fatalf("%d racers took over the stale record, want exactly 1", winners)
	}
}

func testFencingStaleHolder(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	old := request(uniqueKey(t), T0)
	mustReserve(t, s, old)
	after := T0.Add(2 * time.Minute)
	taker := request(old.Record.Key, after)
	mustReserve(t, s, taker)

	// The old holder wakes up: every write it tries is fenced off.
	if err := s.Renew(ctx, fence(old), after.Add(time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(old, store.Succeeded, []byte("stale"), after)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v", err)
	}
	if err := s.Release(ctx, fence(old)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Release: %v", err)
	}
	if err := s.Complete(ctx, complete(taker, store.Succeeded, []byte("fresh"), after)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, old, after); string(got.Value) != "fresh" || got.Token != taker.Record.Token {
		t.Fatalf("record after fencing: token %d value %q", got.Token, got.Value)
	}

	// The same holds when the record expired and a new caller reused the key:
	// a token never comes back.
	expired := T0.Add(3 * time.Hour)
	reuse := request(old.Record.Key, expired)
	mustReserve(t, s, reuse)
	if err := s.Complete(ctx, complete(taker, store.Failed, []byte("ghost"), expired)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete by the holder of an expired record: %v", err)
	}
}

func testTTL(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	if err := s.Complete(ctx, complete(req, store.Succeeded, []byte("v"), T0)); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, req, T0.Add(59*time.Minute))
	wantNotFound(t, s, req, T0.Add(time.Hour)) // expiry is exclusive
	wantNotFound(t, s, req, T0.Add(2*time.Hour))
	// An expired record is absent to Reserve as well, with any fingerprint.
	later := request(req.Record.Key, T0.Add(2*time.Hour))
	later.Record.Fingerprint = "sha256:new"
	later.TakeOverStale = false
	res, err := s.Reserve(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("reserve over an expired record: %+v; want acquired, not a takeover", res)
	}
	checkRecord(t, mustGet(t, s, later, later.Now), later.Record)
}

func testCleanup(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	base := uniqueKey(t)
	var live, expired []store.ReserveRequest
	for i := range 40 {
		req := request(fmt.Sprintf("%s-%d", base, i), T0)
		if i%2 == 0 {
			req.Record.ExpiresAt = T0.Add(time.Duration(1+i) * time.Minute) // expires before T0+1h
			expired = append(expired, req)
		} else {
			req.Record.ExpiresAt = T0.Add(48 * time.Hour)
			live = append(live, req)
		}
		mustReserve(t, s, req)
		if i%4 < 2 { // half of each kind completed
			c := complete(req, store.Succeeded, []byte("v"), T0)
			c.ExpiresAt = req.Record.ExpiresAt
			if err := s.Complete(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := T0.Add(time.Hour)
	if n, err := s.Cleanup(ctx, T0, 0); err != nil || n != 0 {
		t.Fatalf("Cleanup before anything expired: %d, %v", n, err)
	}
	n, err := s.Cleanup(ctx, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !h.NativeExpiry && n != len(expired) {
		t.Fatalf("Cleanup removed %d, want %d", n, len(expired))
	}
	for _, r := range live {
		mustGet(t, s, r, now)
	}
	for _, r := range expired {
		if h.NativeExpiry {
			wantNotFound(t, s, r, now)
		} else {
			// Gone even when read with a clock from before its expiry.
			wantNotFound(t, s, r, T0)
		}
	}
	if h.NativeExpiry {
		return
	}
	if n, err := s.Cleanup(ctx, now, 0); err != nil || n != 0 {
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
	for i := range 25 {
		req := request(fmt.Sprintf("%s-%d", base, i), T0)
		req.Record.ExpiresAt = T0.Add(time.Second)
		mustReserve(t, s, req)
	}
	now := T0.Add(time.Minute)
	total := 0
	for range 10 {
		n, err := s.Cleanup(ctx, now, 10)
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
	value := make([]byte, 4<<20+17)
	if _, err := rand.Read(value); err != nil {
		t.Fatal(err)
	}
	req := request(uniqueKey(t), T0)
	mustReserve(t, s, req)
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, value, T0)); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req, T0)
	if !bytes.Equal(got.Value, value) {
		t.Fatalf("4 MiB value differs after a round trip (got %d bytes)", len(got.Value))
	}
}

func testBinaryValue(t *testing.T, h Harness) {
	s := newStore(t, h)
	for _, v := range [][]byte{{}, {0, 0xff, '"', '\\', '\n', 0x80}, []byte(`{"a":"ü\u0000"}`)} {
		req := request(uniqueKey(t), T0)
		mustReserve(t, s, req)
		if err := s.Complete(context.Background(), complete(req, store.Succeeded, v, T0)); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, req, T0); !bytes.Equal(got.Value, v) {
			t.Fatalf("value %q came back as %q", v, got.Value)
		}
	}
	// Keys and scopes with any printable text, including quotes, slashes and
	// non-ASCII letters.
	for _, key := range []string{`a"b'c`, "päyment/ü/../x", strings.Repeat("k", 255), "{tag}:x"} {
		req := request(key+uniqueKey(t), T0)
		req.Record.Scope = `tenant "7"/POST /api/x`
		req.Record.KeyHash = store.HashKey(req.Record.Scope, req.Record.Key)
		mustReserve(t, s, req)
		checkRecord(t, mustGet(t, s, req, T0), req.Record)
	}
}

func testContextCanceled(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := request(uniqueKey(t), T0)
	if _, err := s.Reserve(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a canceled context: %v", err)
	}
	wantNotFound(t, s, req, T0)
	mustReserve(t, s, req)
	if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash, T0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v", err)
	}
	if err := s.Renew(ctx, fence(req), T0.Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(req, store.Succeeded, []byte("x"), T0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.Cleanup(ctx, T0.Add(48*time.Hour), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Cleanup: %v", err)
	}
	// Nothing above took effect.
	got := mustGet(t, s, req, T0)
	if got.State != store.InProgress || !sameTime(got.LeaseUntil, req.Record.LeaseUntil) {
		t.Fatalf("a canceled call changed the record: %+v", got)
	}
	// A deadline that passes while waiting is reported as such.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := s.Reserve(dctx, request(uniqueKey(t), T0)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve past its deadline: %v", err)
	}
}

func testKeyNotIndexed(t *testing.T, h Harness) {
	if h.IndexKeys == nil {
		t.Skip("the harness cannot list the index")
	}
	s := newStore(t, h)
	raw := "raw-key-" + uniqueKey(t)
	req := request(raw, T0)
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
	a, b := request(key, T0), request(key, T0)
	a.Record.Scope, b.Record.Scope = "tenant-a", "tenant-b"
	a.Record.KeyHash, b.Record.KeyHash = store.HashKey("tenant-a", key), store.HashKey("tenant-b", key)
	mustReserve(t, s, a)
	mustReserve(t, s, b)
	if err := s.Complete(context.Background(), complete(a, store.Succeeded, []byte("A"), T0)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, b, T0); got.State != store.InProgress || len(got.Value) != 0 {
		t.Fatalf("tenant b sees %+v", got)
	}
	// Returned records are copies.
	got := mustGet(t, s, a, T0)
	got.Value[0] = 'X'
	if again := mustGet(t, s, a, T0); string(again.Value) != "A" {
		t.Fatalf("mutating a returned value changed the store: %q", again.Value)
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.New(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(context.Background(), request(uniqueKey(t), T0)); err == nil {
		t.Fatal("Reserve after Close succeeded")
	}
}
