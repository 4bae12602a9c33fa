package idem_test

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// runsSoon retries k until it runs or 3 s pass: far less than the lease, so
// a key left in progress until its lease ends fails it.
func runsSoon(t *testing.T, eng *idem.Engine, k string, op *counter) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		res, err := eng.Do(bg, call(k), op.fn)
		if err == nil {
			if res.Replayed || op.n.Load() != 1 {
				t.Fatalf("retry: %+v, ran %d times", res, op.n.Load())
			}
			return
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("retry after the lost answer: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLostReservationAnswer: a reservation the store applied but whose
// answer was lost holds the key under a token nobody has. The caller got
// ErrStoreUnavailable and nothing ran; the engine frees the key, so its
// retry runs at once instead of getting ErrInProgress for a whole lease.
func TestLostReservationAnswer(t *testing.T) {
	t.Parallel()
	for _, onStale := range []idem.OnStale{idem.OnStaleRetry, idem.OnStaleConflict} {
		t.Run(onStale.String(), func(t *testing.T) {
			t.Parallel()
			l := &faulty{Store: memory.New()}
			var freed atomic.Int64
			eng := idem.New(l, idem.Policy{CleanupInterval: -1, OnStale: onStale}, quiet,
				idem.WithOnFreed(func(scope string) {
					if scope == "charges" {
						freed.Add(1)
					}
				}))
			defer eng.Close()
			op := &counter{value: "v"}
			l.loseReserve.Store(true)
			l.releaseErr.Store(3) // still down for the first frees
			if _, err := eng.Do(bg, call("k"), op.fn); !errors.Is(err, idem.ErrStoreUnavailable) || op.n.Load() != 0 {
				t.Fatalf("%v, ran %d", err, op.n.Load())
			}
			if _, err := l.Get(bg, "charges", store.HashKey("charges", "k")); err != nil {
				t.Fatalf("the lost reservation is not in the store: %v", err)
			}
			l.loseReserve.Store(false)
			runsSoon(t, eng, "k", op)
			if n := l.releases.Load(); n < 4 {
				t.Fatalf("%d releases; want the failed ones retried", n)
			}
			// One reservation freed, once: the failed attempts are not.
			// The hook runs just after the Release that let the key run.
			deadline := time.Now().Add(3 * time.Second)
			for freed.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := freed.Load(); n != 1 {
				t.Fatalf("WithOnFreed's hook ran %d times; want 1", n)
			}
		})
	}
}

// TestLostAnswerNeverFreesAnother: the free is fenced by the lost
// reservation's token. A key whose record is someone else's, or that the
// lost reservation never reached, keeps its record.
func TestLostAnswerNeverFreesAnother(t *testing.T) {
	t.Parallel()
	l := &faulty{Store: memory.New()}
	var freed atomic.Int64
	eng := idem.New(l, idem.Policy{CleanupInterval: -1}, quiet, idem.WithOnFreed(func(string) { freed.Add(1) }))
	defer eng.Close()
	op := &counter{value: "v"}
	if _, err := eng.Do(bg, call("done"), op.fn); err != nil {
		t.Fatal(err)
	}
	l.loseReserve.Store(true)
	// The reservation finds the record completed: the store applied
	// nothing, and the free must leave it.
	if _, err := eng.Do(bg, call("done"), op.fn); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatal(err)
	}
	l.loseReserve.Store(false)
	deadline := time.Now().Add(3 * time.Second)
	for l.releases.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if l.releases.Load() == 0 {
		t.Fatal("no free was tried")
	}
	res, err := eng.Do(bg, call("done"), op.fn)
	if err != nil || !res.Replayed || op.n.Load() != 1 {
		t.Fatalf("the first outcome: %+v %v, ran %d", res, err, op.n.Load())
	}
	if n := freed.Load(); n != 0 {
		t.Fatalf("WithOnFreed's hook ran %d times for a free that found nothing of ours", n)
	}
}

// TestCloseStopsFreeing: a store that stays down leaves the frees
// pending; Close ends them without waiting out the lease. Meanwhile the
// engine tries one free per pause, not one per pending reservation.
func TestCloseStopsFreeing(t *testing.T) {
	t.Parallel()
	l := &faulty{Store: memory.New()}
	l.loseReserve.Store(true)
	l.releaseErr.Store(1 << 30)
	eng := idem.New(l, idem.Policy{CleanupInterval: -1}, quiet)
	start := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := eng.Do(bg, call(k), (&counter{}).fn); !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); l.releases.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no free was tried")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	closed := make(chan struct{})
	go func() { eng.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the pending frees")
	}
	// Pauses of 10, 20, 40 ms ... make about log2(elapsed / 10 ms) + 1
	// attempts; one per pending key would make three times that.
	elapsed := time.Since(start)
	allowed := int32(4 + bits.Len(uint(elapsed/(10*time.Millisecond))))
	if n := l.releases.Load(); n > allowed {
		t.Fatalf("%d release attempts for 3 keys in %v; want at most %d", n, elapsed, allowed)
	}
}
