package localtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
)

// GroupCommit runs 64 reserve+complete pairs one after another, then 64
// at once: alone, every write waits for a sync of its own (Syncs counts
// them); at once, the writes share them, GroupShare writes or more a sync.
func GroupCommit(t *testing.T, h Harness) {
	s := h.OpenT(t, t.TempDir())
	ctx := context.Background()
	pair := func(key string) error {
		req := ReserveReq(key, time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			return err
		}
		return s.Complete(ctx, store.Completion{Fence: FenceOf(req), State: store.Succeeded,
			Value: []byte(key), TTL: time.Hour})
	}
	const n = 64
	syncs0, begin := h.Syncs(t, s), time.Now()
	for i := range n {
		if err := pair(fmt.Sprint("seq-", i)); err != nil {
			t.Fatal(err)
		}
	}
	seqTime, seqSyncs := time.Since(begin), h.Syncs(t, s)-syncs0

	// The racers overlap only if the scheduler lets them: on a loaded
	// machine with two cores it may run them one after another, and then
	// no group forms. Up to GroupAttempts attempts give them the chance to
	// overlap.
	var concTime time.Duration
	var concSyncs uint64
	for attempt := range h.GroupAttempts {
		errs := make(chan error, n)
		syncs0, begin = h.Syncs(t, s), time.Now()
		testkit.FanOut(n, func(i int) { errs <- pair(fmt.Sprint("conc-", attempt, "-", i)) })
		concTime, concSyncs = time.Since(begin), h.Syncs(t, s)-syncs0
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// The times are for the reader (the machine may be shared); the
		// sync counts are what group commit promises, and are asserted.
		t.Logf("sequential: %v, %d syncs; concurrent (attempt %d): %v, %d syncs", seqTime, seqSyncs, attempt+1, concTime, concSyncs)
		if concSyncs*h.GroupShare <= 2*n {
			break
		}
	}
	// Durable: each lone commit waited for its own sync (a count may lag
	// by SyncLag; without a lag it is exact).
	if seqSyncs < 2*n-h.SyncLag || h.SyncLag == 0 && seqSyncs != 2*n {
		t.Errorf("%d sequential pairs took %d syncs, want %d", n, seqSyncs, 2*n)
	}
	if concSyncs*h.GroupShare > 2*n {
		t.Errorf("%d concurrent pairs took %d syncs, want at most %d", n, concSyncs, 2*n/h.GroupShare)
	}
}

// CountExpired: the store counts the records whose lifetime is over (its
// CountExpired, called through the harness), and Cleanup removes as many.
func CountExpired(t *testing.T, h Harness) {
	s := h.OpenT(t, t.TempDir())
	ctx := context.Background()
	last := ReserveMany(t, s, 30, time.Hour, func(i int) bool { return i <= 10 })
	Gone(t, s, last)
	n, err := h.CountExpired(ctx, s)
	if err != nil || n != 11 {
		t.Fatalf("CountExpired = %d, %v; want 11", n, err)
	}
	if removed, _ := s.Cleanup(ctx, 0); removed != n {
		t.Fatalf("Cleanup removed %d, CountExpired said %d", removed, n)
	}
}
