package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// forgetful loses each reservation just before its completion, as a
// failover to a replica that never received the reservation does.
type forgetful struct {
	store.Store
}

func (f forgetful) Complete(ctx context.Context, c store.Completion) error {
	if err := f.Store.Release(ctx, c.Fence); err != nil {
		return err
	}
	return f.Store.Complete(ctx, c)
}

// TestRecordLost: a holder whose record the store lost is answered as a
// lost lease, never as recorded, and WithOnRecordLost counts it; a holder
// whose key another caller took over is not counted.
func TestRecordLost(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	eng := idem.New(forgetful{memory.New()}, idem.Policy{CleanupInterval: -1}, quiet,
		idem.WithOnRecordLost(func(scope string) {
			if scope == "charges" {
				lost.Add(1)
			}
		}))
	defer eng.Close()
	op := &counter{value: "v"}
	res, err := eng.Do(bg, call("k"), op.fn)
	if !errors.Is(err, idem.ErrLeaseLost) || !res.NotRecorded || op.n.Load() != 1 {
		t.Fatalf("completion of a lost record: %+v, %v, ran %d; want ErrLeaseLost, NotRecorded", res, err, op.n.Load())
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("WithOnRecordLost's hook ran %d times; want 1", n)
	}

	// A key taken over by another caller is a lost lease, not a lost
	// record.
	s := memory.New()
	eng2 := idem.New(s, idem.Policy{CleanupInterval: -1}, quiet, idem.WithOnRecordLost(func(string) { lost.Add(1) }))
	defer eng2.Close()
	_, err = eng2.Do(bg, call("k2"), func(ctx context.Context) ([]byte, error) {
		r, _ := s.Get(ctx, "charges", store.HashKey("charges", "k2"))
		// Another holder's reservation replaces this one's.
		if err := s.Release(ctx, store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: r.Token}); err != nil {
			return nil, err
		}
		r.Token++
		if _, err := s.Reserve(ctx, store.ReserveRequest{Record: r, Lease: idem.DefaultLease, TTL: idem.DefaultTTL}); err != nil {
			return nil, err
		}
		return []byte("v"), nil
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("completion of a key taken over: %v; want ErrLeaseLost", err)
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("WithOnRecordLost's hook ran for a takeover (%d times in all)", n)
	}
}
