package history

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestMemory: the memory store's histories are linearizable.
func TestMemory(t *testing.T) {
	t.Parallel()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	Check(t, Config{}, s)
}

// racyReserve is a memory store whose Reserve is not atomic: it reads the
// record, yields, and then writes over whatever is there by then (a
// read-modify-write without a condition, the bug the stores' conditional
// writes and transactions exist to prevent).
type racyReserve struct{ *memory.Store }

func (s racyReserve) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r := req.Record
	cur, err := s.Get(ctx, r.Scope, r.KeyHash)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Reservation{}, err
	}
	if found && !(req.TakeOverStale && cur.Stale() && cur.Fingerprint == r.Fingerprint && cur.Binding == r.Binding) {
		return store.Reservation{Existing: cur}, nil
	}
	runtime.Gosched()
	time.Sleep(50 * time.Microsecond)
	// The unconditional write: free whatever is there now, then write.
	for range 100 {
		if now, err := s.Get(ctx, r.Scope, r.KeyHash); err == nil {
			_ = s.Release(ctx, store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: now.Token})
		}
		res, err := s.Store.Reserve(ctx, store.ReserveRequest{Record: r, Lease: req.Lease, TTL: req.TTL})
		if err != nil {
			return res, err
		}
		if res.Acquired || res.Existing.State == store.Succeeded {
			break
		}
	}
	return store.Reservation{Acquired: true, TookOver: found}, nil
}

// TestBrokenStoreFails: the checker finds a store whose Reserve is not
// atomic out, every time.
func TestBrokenStoreFails(t *testing.T) {
	t.Parallel()
	const runs = 20
	illegal := 0
	var took time.Duration
	for range runs {
		s := racyReserve{memory.New()}
		h := Record(context.Background(), Config{}, s)
		_ = s.Close()
		start := time.Now()
		res, _ := h.Check(checkTimeout)
		took += time.Since(start)
		if res == porcupine.Illegal {
			illegal++
		}
	}
	t.Logf("not linearizable in %d of %d histories (checked in %v on average)", illegal, runs, took/runs)
	if illegal != runs {
		t.Errorf("the checker passed a store whose Reserve is not atomic in %d of %d histories", runs-illegal, runs)
	}
}

// TestFastClockFails: a store whose clock runs twenty times too fast takes
// live holders' keys over; the checker finds it out by the lease rule.
func TestFastClockFails(t *testing.T) {
	t.Parallel()
	const runs = 5
	illegal := 0
	for range runs {
		start := time.Now()
		s := memory.New(memory.WithClock(func() time.Time { return start.Add(20 * time.Since(start)) }))
		h := Record(context.Background(), Config{}, s)
		_ = s.Close()
		if res, _ := h.Check(checkTimeout); res == porcupine.Illegal {
			illegal++
		}
	}
	if illegal != runs {
		t.Errorf("the checker passed a store that takes live holders over in %d of %d histories", runs-illegal, runs)
	}
}
