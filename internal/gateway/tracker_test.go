package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// TestTracker: held keys are listed until they end; failed ones and ones a
// request found stale become candidates, at most Max of them, newest
// first; a new holder clears a candidate.
func TestTracker(t *testing.T) {
	t.Parallel()
	tr := &Tracker{Max: 3}
	s := tr.Wrap(memory.New())
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	reserve := func(key string, token uint64, lease time.Duration) store.Reservation {
		t.Helper()
		rec := store.Record{KeyHash: store.HashKey("sc", key), Scope: "sc", Key: key, State: store.InProgress, Token: token,
			Fingerprint: "f"}
		r, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: lease, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fence := func(key string, token uint64) store.Fence {
		return store.Fence{KeyHash: store.HashKey("sc", key), Scope: "sc", Token: token}
	}
	for i := range 5 {
		reserve(fmt.Sprint("k", i), uint64(i+1), time.Minute)
	}
	if l := tr.InProgress(); len(l) != 5 || l[0].Key != "k0" || l[4].Key != "k4" {
		t.Fatalf("in progress %+v", l)
	}
	for i := range 5 {
		c := store.Completion{Fence: fence(fmt.Sprint("k", i), uint64(i+1)), State: store.Failed, TTL: time.Hour}
		if i == 4 {
			c.State = store.Succeeded
		}
		if err := s.Complete(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if l := tr.InProgress(); len(l) != 0 {
		t.Errorf("in progress after completion %+v", l)
	}
	// Four failed, Max 3: the oldest (k0) is dropped; newest first.
	if l := tr.Candidates(now); len(l) != 3 || l[0].Key != "k3" || l[2].Key != "k1" {
		t.Errorf("candidates %+v", l)
	}
	// A lost lease ends the holding without a candidate.
	reserve("lost", 9, time.Minute)
	if err := s.Complete(ctx, store.Completion{Fence: fence("lost", 10), State: store.Failed, TTL: time.Hour}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatal(err)
	}
	if len(tr.InProgress()) != 1 {
		t.Error("a failed completion by another token ended our holding")
	}
	if err := s.Release(ctx, fence("lost", 9)); err != nil {
		t.Fatal(err)
	}
	if len(tr.InProgress()) != 0 {
		t.Error("released key still listed")
	}
	// A request that finds a dead holder makes it a candidate.
	reserve("dead", 11, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // its lease is over
	if r := reserve("dead", 12, time.Minute); r.Acquired {
		t.Fatal("took over without TakeOverStale")
	}
	found := false
	for _, k := range tr.Candidates(now) {
		found = found || k.Key == "dead"
	}
	if l := tr.Candidates(now); !found || len(l) != 3 {
		t.Errorf("candidates %+v", l)
	}
	// A held key never seen to end is dropped after forgetAfter.
	tr.mu.Lock()
	for id, k := range tr.inflight {
		k.Since = now.Add(-2 * forgetAfter)
		tr.inflight[id] = k
	}
	tr.mu.Unlock()
	if l := tr.InProgress(); len(l) != 0 {
		t.Errorf("forgotten keys listed %+v", l)
	}
}
