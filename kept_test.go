package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// fullStore refuses writes for want of space while full is set, as a store
// on a full disk does: Complete, and Renew too when renewals is set.
type fullStore struct {
	store.Store
	full     atomic.Bool
	renewals atomic.Bool // renewals fail too
	renewed  atomic.Int32
}

var errFull = errors.Join(store.ErrNoSpace, errors.New("write log: no space left on device"))

func (f *fullStore) Complete(ctx context.Context, c store.Completion) error {
	if f.full.Load() {
		return errFull
	}
	return f.Store.Complete(ctx, c)
}

func (f *fullStore) Renew(ctx context.Context, fe store.Fence, lease time.Duration) error {
	if f.full.Load() && f.renewals.Load() {
		return errFull
	}
	f.renewed.Add(1)
	return f.Store.Renew(ctx, fe, lease)
}

// TestOutcomeKeptWhileTheStoreIsFull: the store refuses the outcome of a
// call that ran. The caller learns at once that it is not recorded, and
// the engine keeps it: retries here replay it without running the
// operation, another replica sees the key held (its lease renewed) and
// takes nothing over, and once the store has room again the outcome is
// written and every replica replays it.
func TestOutcomeKeptWhileTheStoreIsFull(t *testing.T) {
	t.Parallel()
	// Long enough that a renewal is not missed on a busy machine: a
	// missed one would rightly let the other replica take the key over.
	const lease = 1500 * time.Millisecond
	mem := memory.New()
	full := &fullStore{Store: mem}
	p := idem.Policy{Lease: lease, CleanupInterval: -1}
	here := idem.New(full, p, quiet)
	other := idem.New(mem, p, quiet)
	t.Cleanup(func() { here.Close(); other.Close() })
	op := &counter{value: "charged"}

	full.full.Store(true)
	start := time.Now()
	res, err := here.Do(bg, call("k"), op.fn)
	if !errors.Is(err, idem.ErrStoreUnavailable) || !res.NotRecorded || !res.Kept || string(res.Value) != "charged#1" {
		t.Fatalf("first call on a full store: %+v %v; want its value, not recorded, kept", res, err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the first call waited %v before it was told", waited)
	}
	if here.Kept() != 1 {
		t.Fatalf("kept %d outcomes, want 1", here.Kept())
	}
	// Three leases pass while the store stays full.
	for range 3 {
		time.Sleep(lease)
		res, err := here.Do(bg, call("k"), op.fn)
		if err != nil || !res.Replayed || string(res.Value) != "charged#1" {
			t.Fatalf("retry here while full: %+v %v; want the kept outcome replayed", res, err)
		}
		if _, err := other.Do(bg, call("k"), op.fn); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("retry on another replica while full: %v; want in progress", err)
		}
	}
	if full.renewed.Load() == 0 {
		t.Fatal("the kept key's lease was never renewed")
	}
	// Mismatches are still mismatches.
	mismatch := call("k")
	mismatch.Fingerprint = "other"
	if _, err := here.Do(bg, mismatch, op.fn); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("another payload with the kept key: %v", err)
	}

	full.full.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for here.Kept() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the kept outcome was not written once the store had room")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, eng := range []*idem.Engine{here, other} {
		res, err := eng.Do(bg, call("k"), op.fn)
		if err != nil || !res.Replayed || string(res.Value) != "charged#1" {
			t.Fatalf("after the store recovered: %+v %v", res, err)
		}
	}
	if n := op.n.Load(); n != 1 {
		t.Fatalf("the operation ran %d times, want once", n)
	}
}

// TestKeptAnswersPastItsLease: on a store that refuses renewals too (an
// embedded store on a full disk writes them), the lease runs out in the
// store; retries in the holding process still get the kept outcome and
// never run the operation again.
func TestKeptAnswersPastItsLease(t *testing.T) {
	t.Parallel()
	const lease = 200 * time.Millisecond
	full := &fullStore{Store: memory.New()}
	full.renewals.Store(true)
	eng := idem.New(full, idem.Policy{Lease: lease, CleanupInterval: -1}, quiet)
	t.Cleanup(func() { eng.Close() })
	op := &counter{value: "v"}
	full.full.Store(true)
	if res, _ := eng.Do(bg, call("k"), op.fn); !res.Kept {
		t.Fatalf("not kept: %+v", res)
	}
	time.Sleep(3 * lease)
	res, err := eng.Do(bg, call("k"), op.fn)
	if err != nil || !res.Replayed || op.n.Load() != 1 {
		t.Fatalf("retry past the lease: %+v %v, ran %d", res, err, op.n.Load())
	}
	full.full.Store(false)
	for deadline := time.Now().Add(20 * time.Second); eng.Kept() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not written once the store had room")
		}
	}
	if res, err := eng.Do(bg, call("k"), op.fn); err != nil || !res.Replayed || op.n.Load() != 1 {
		t.Fatalf("after recovery: %+v %v, ran %d", res, err, op.n.Load())
	}
}

// TestKeptIsDroppedWhenTakenOver: a kept outcome whose key another holder
// took over (its lease was lost while the store refused the outcome) is
// dropped: the taker's outcome stands.
func TestKeptIsDroppedWhenTakenOver(t *testing.T) {
	t.Parallel()
	const lease = 200 * time.Millisecond
	mem := memory.New()
	full := &fullStore{Store: mem}
	full.renewals.Store(true)
	p := idem.Policy{Lease: lease, CleanupInterval: -1}
	here, other := idem.New(full, p, quiet), idem.New(mem, p, quiet)
	t.Cleanup(func() { here.Close(); other.Close() })
	full.full.Store(true)
	if res, _ := here.Do(bg, call("k"), (&counter{value: "first"}).fn); !res.Kept {
		t.Fatalf("not kept: %+v", res)
	}
	var res idem.Result
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(lease / 4) {
		var err error
		res, err = other.Do(bg, call("k"), (&counter{value: "second"}).fn)
		if err == nil {
			break
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("takeover: %v", err)
		}
	}
	if !res.TookOver || string(res.Value) != "second#1" {
		t.Fatalf("takeover: %+v", res)
	}
	full.full.Store(false)
	for deadline := time.Now().Add(20 * time.Second); here.Kept() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the taken-over outcome was not dropped")
		}
	}
	if res, err := here.Do(bg, call("k"), (&counter{}).fn); err != nil || string(res.Value) != "second#1" {
		t.Fatalf("after the drop: %+v %v, want the taker's outcome", res, err)
	}
}
