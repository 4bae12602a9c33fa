package pebblestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// TestHeldWritten: a reservation kept in memory past Options.HoldFor is
// committed by the sweep and kept no longer; it is then a record like
// others, which its holder renews, completes or releases and another
// caller reads.
func TestHeldWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openT(t, t.TempDir(), func(o *Options) { o.OneSync, o.HoldFor = true, time.Millisecond })
	onDisk := func(req store.ReserveRequest) *store.Record { return checkIndex(t, s)[req.Record.KeyHash] }
	swept := func(req store.ReserveRequest) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if r := onDisk(req); r != nil && r.Token == req.Record.Token && s.npending.Load() == 0 {
				return
			}
		}
		t.Fatalf("%s: the reservation kept in memory was not committed past the bound", req.Record.Key)
	}
	a := localtest.Reserved(t, s, "a", time.Hour)
	swept(a)
	if r, err := s.Get(ctx, "s", a.Record.KeyHash); err != nil || r.State != store.InProgress || r.Token != a.Record.Token {
		t.Fatalf("a swept reservation: %+v, %v", r, err)
	}
	if err := s.Renew(ctx, localtest.FenceOf(a), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	localtest.Complete(t, s, a, "v", time.Hour)
	if r := onDisk(a); r == nil || r.State != store.Succeeded {
		t.Fatalf("a swept reservation completed: %+v", r)
	}
	b := localtest.Reserved(t, s, "b", time.Hour)
	swept(b)
	if err := s.Release(ctx, localtest.FenceOf(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "s", b.Record.KeyHash); !errors.Is(err, store.ErrNotFound) || onDisk(b) != nil {
		t.Fatalf("a swept reservation released: %v, want ErrNotFound", err)
	}
}
