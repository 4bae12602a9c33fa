package leasewatch

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// stepped is a monotonic clock that moves only when told.
type stepped struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *stepped) read() time.Duration  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepped) step(d time.Duration) { c.mu.Lock(); c.now += d; c.mu.Unlock() }

func TestLeftCountsFromTheFirstSighting(t *testing.T) {
	c := &stepped{now: time.Hour} // any origin
	w := &Watcher{Mono: c.read}
	const lease = 10 * time.Second
	if got := w.Left("k", "v1", lease); got != lease {
		t.Fatalf("first sighting: %v left, want the whole lease %v", got, lease)
	}
	c.step(4 * time.Second)
	if got := w.Left("k", "v1", lease); got != 6*time.Second {
		t.Fatalf("after 4 s unchanged: %v left, want 6s", got)
	}
	c.step(6 * time.Second)
	if got := w.Left("k", "v1", lease); got != 0 {
		t.Fatalf("after a whole lease unchanged: %v left, want 0 (over)", got)
	}
	c.step(time.Second)
	if got := w.Left("k", "v1", lease); got >= 0 {
		t.Fatalf("past the lease: %v left, want < 0", got)
	}
}

// A renewal is a new version: the count starts again, with the lease the
// new version stores.
func TestNewVersionRestartsTheCount(t *testing.T) {
	c := &stepped{}
	w := &Watcher{Mono: c.read}
	w.Left("k", "v1", 10*time.Second)
	c.step(9 * time.Second)
	if got := w.Left("k", "v2", 3*time.Second); got != 3*time.Second {
		t.Fatalf("renewed: %v left, want the new lease 3s", got)
	}
	c.step(2 * time.Second)
	if got := w.Left("k", "v2", 3*time.Second); got != time.Second {
		t.Fatalf("2 s into the renewed lease: %v left, want 1s", got)
	}
}

// A late read of an older version (two calls of one client in flight
// around a renewal) goes on with that version's count: it was the
// record's version all along until the newer one, and restarting it
// would have the client answer with a version it watched as new.
func TestLateReadOfOlderVersion(t *testing.T) {
	c := &stepped{}
	w := &Watcher{Mono: c.read}
	w.Left("k", "v1", 10*time.Second)
	c.step(10 * time.Second)
	if got := w.Left("k", "v2", 10*time.Second); got != 10*time.Second {
		t.Fatalf("new version: %v left", got)
	}
	if got := w.Left("k", "v1", 10*time.Second); got != 0 {
		t.Fatalf("late read of v1: %v left, want its count (0)", got)
	}
	if got := w.Left("k", "v2", 10*time.Second); got != 10*time.Second {
		t.Fatalf("v2 after the late read: %v left, want its own count", got)
	}
	// Only the last keepVersions versions are remembered.
	for i := range keepVersions {
		w.Left("k", fmt.Sprint("w", i), 10*time.Second)
	}
	if got := w.Left("k", "v1", 10*time.Second); got != 10*time.Second {
		t.Fatalf("v1 after %d newer versions: %v left, want a new watch", keepVersions, got)
	}
	if w.Len() != 1 {
		t.Fatalf("Len %d, want 1", w.Len())
	}
}

func TestKeysAreWatchedApart(t *testing.T) {
	c := &stepped{}
	w := &Watcher{Mono: c.read}
	w.Left("a", "v", time.Second)
	c.step(time.Second)
	if got := w.Left("b", "v", time.Second); got != time.Second {
		t.Fatalf("key b, same version name, first seen: %v left", got)
	}
	if got := w.Left("a", "v", time.Second); got != 0 {
		t.Fatalf("key a after its lease: %v left", got)
	}
	if w.Len() != 2 {
		t.Fatalf("Len %d, want 2", w.Len())
	}
	w.Forget("a")
	if got := w.Left("a", "v", time.Second); got != time.Second {
		t.Fatalf("key a after Forget: %v left, want a new watch", got)
	}
}

func TestWatchKeepsTheFirstStamp(t *testing.T) {
	c := &stepped{}
	w := &Watcher{Mono: c.read}
	t0 := time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)
	left, since := w.Watch("k", "v1", time.Minute, t0)
	if left != time.Minute || !since.Equal(t0) {
		t.Fatalf("first: %v, %v", left, since)
	}
	c.step(10 * time.Second)
	left, since = w.Watch("k", "v1", time.Minute, t0.Add(11*time.Second))
	if left != 50*time.Second || !since.Equal(t0) {
		t.Fatalf("again: %v, %v; want 50s and the first stamp", left, since)
	}
	_, since = w.Watch("k", "v2", time.Minute, t0.Add(12*time.Second))
	if !since.Equal(t0.Add(12 * time.Second)) {
		t.Fatalf("new version: since %v, want its own stamp", since)
	}
}

// Sightings of keys nobody looks at again are dropped after twice their
// lease, once pruneEvery new ones were added; recent ones stay.
func TestPrune(t *testing.T) {
	c := &stepped{}
	w := &Watcher{Mono: c.read}
	w.Left("old", "v", time.Second)
	c.step(3 * time.Second)
	w.Left("recent", "v", time.Minute)
	for i := range pruneEvery - 3 {
		w.Left(fmt.Sprint(i), "v", time.Minute)
	}
	if w.Len() != pruneEvery-1 {
		t.Fatalf("before the sweep: %d watched, want %d", w.Len(), pruneEvery-1)
	}
	w.Left("one more", "v", time.Minute) // the pruneEvery-th addition sweeps
	if w.Len() != pruneEvery-1 {
		t.Fatalf("after the sweep: %d watched, want %d (old dropped, one added)", w.Len(), pruneEvery-1)
	}
	if got := w.Left("recent", "v", time.Minute); got != time.Minute {
		t.Fatalf("a recent sighting was dropped or moved: %v left", got)
	}
	if got := w.Left("old", "v", time.Second); got != time.Second {
		t.Fatalf("the old sighting was kept: %v left, want a new watch", got)
	}
}

// The zero Watcher reads the monotonic clock.
func TestZeroValueRealClock(t *testing.T) {
	var w Watcher
	const lease = 50 * time.Millisecond
	if got := w.Left("k", "v", lease); got != lease {
		t.Fatalf("first: %v", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.Left("k", "v", lease) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("lease never over on the real clock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrentUse(t *testing.T) {
	var w Watcher
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := fmt.Sprint(g, i%17)
				w.Left(k, fmt.Sprint(i%3), time.Minute)
				if i%5 == 0 {
					w.Forget(k)
				}
			}
		})
	}
	wg.Wait()
}
