package file

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// swept waits until req's reservation, kept in memory, has a frame the
// sweep wrote (sweepHeld); it fails t if that takes ten seconds.
func swept(t *testing.T, s *Store, req store.ReserveRequest) {
	t.Helper()
	id := mustID(t, req.Record.KeyHash)
	st := &s.stripes[stripeOf(id)]
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		st.mu.Lock()
		slot, e := lookup(st, &id)
		st.mu.Unlock()
		if slot >= 0 && e.seg != inMemory {
			return
		}
	}
	t.Fatalf("%s: the reservation kept in memory was not written past the bound", req.Record.Key)
}

// TestHeldWritten: a reservation kept in memory past Options.HoldFor is
// written by the sweep, and is then a record like others: its holder
// completes or releases it, and another caller reads it. Should the
// sweep's write fail, the reservation is kept in memory again, its
// holder's, and written by the next caller that reads it once the log
// writes again.
func TestHeldWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openT(t, t.TempDir(), func(o *Options) { o.OneSync, o.HoldFor = true, time.Millisecond })
	a := localtest.Reserved(t, s, "a", time.Hour)
	swept(t, s, a)
	if r, err := s.Get(ctx, "s", a.Record.KeyHash); err != nil || r.State != store.InProgress || r.Token != a.Record.Token {
		t.Fatalf("a swept reservation: %+v, %v", r, err)
	}
	localtest.Complete(t, s, a, "v", time.Hour)
	b := localtest.Reserved(t, s, "b", time.Hour)
	swept(t, s, b)
	if err := s.Release(ctx, localtest.FenceOf(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "s", b.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a swept reservation released: %v, want ErrNotFound", err)
	}

	c := localtest.Reserved(t, s, "c", time.Hour)
	failed := errors.New("injected: the log refuses writes")
	s.log.broken.Store(&failed)
	swept(t, s, c)
	if _, err := s.Get(ctx, "s", c.Record.KeyHash); !errors.Is(err, failed) {
		t.Fatalf("a Get of a reservation whose swept frame failed: %v, want the injected error", err)
	}
	if res, err := s.Reserve(ctx, localtest.ReserveReq("c", time.Hour)); res.Acquired {
		t.Fatalf("another caller took the key while its reservation could not be written: %+v, %v", res, err)
	}
	s.log.broken.Store(nil)
	s.log.unwritable.Store(nil)
	r, err := s.Get(ctx, "s", c.Record.KeyHash)
	if err != nil || r.State != store.InProgress || r.Token != c.Record.Token {
		t.Fatalf("the key once the log writes again: %+v, %v; want the holder's reservation", r, err)
	}
	localtest.Complete(t, s, c, "v", time.Hour)
	if n := s.nkept.Load(); n != 0 {
		t.Fatalf("%d reservations counted as kept in memory, none is", n)
	}
	s.Close()
	s = openT(t, s.log.dir, oneSync)
	for _, req := range []store.ReserveRequest{a, c} {
		if r, err := s.Get(ctx, "s", req.Record.KeyHash); err != nil || r.State != store.Succeeded {
			t.Fatalf("%s after a reopen: %+v, %v", req.Record.Key, r, err)
		}
	}
}
