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
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
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

	// Swept, when not nil, returns how many expired records the store s
	// removed by itself, outside Cleanup (the file store sweeps on its
	// log's rotation): Cleanup's count is checked with them added.
	Swept func(s store.Store) int

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
	// on deletes (gofakes3 ignores If-Match on DeleteObject), or does not
	// apply them atomically with a concurrent conditional write
	// (versitygw), so that a Release racing a takeover may delete the new
	// holder's record. The
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
		{"EngineIdentityUpgrade", testIdentityUpgrade},
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
