package expiry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestTake checks the buckets: items come out oldest second first, only
// when due (to the nanosecond within now's second), at most max at a time,
// and items put back come out again.
func TestTake(t *testing.T) {
	t.Parallel()
	x := New[int]()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	at := []time.Duration{3 * time.Second, 0, 900 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, time.Second}
	for i, d := range at {
		x.Add(i, t0.Add(d))
	}
	now := t0.Add(500 * time.Millisecond) // due: 1 (0), 3 (100 ms), 4 (500 ms)
	if due := x.Due(now); len(due) != 3 {
		t.Fatalf("Due = %v, want 3 items", due)
	}
	got := x.Take(now, 2)
	if len(got) != 2 {
		t.Fatalf("Take(max 2) = %d items", len(got))
	}
	x.PutBack(got[1:])
	rest := x.Take(now, 10)
	seen := map[int]bool{got[0].Key: true}
	for _, it := range rest {
		seen[it.Key] = true
	}
	if len(rest) != 2 || len(seen) != 3 || !seen[1] || !seen[3] || !seen[4] {
		t.Fatalf("due at +500ms: took %v then %v, want 1, 3 and 4 once each", got, rest)
	}
	if more := x.Take(now, 10); len(more) != 0 {
		t.Fatalf("nothing more is due, took %v", more)
	}
	if n := x.Len(); n != 3 {
		t.Fatalf("%d items left, want 3", n)
	}
	later := x.Take(t0.Add(time.Hour), 10)
	if len(later) != 3 || later[0].Key != 2 || later[1].Key != 5 || later[2].Key != 0 {
		t.Fatalf("an hour later took %v, want 2, 5 and 0, oldest second first", later)
	}
	if !later[0].At(t0.Add(900*time.Millisecond)) || later[0].At(t0) {
		t.Fatalf("Item.At: %+v", later[0])
	}
}

// TestSweep checks that Sweep stops at limit removals (items that remove
// nothing do not count), and that a done context puts back what it did not
// visit.
func TestSweep(t *testing.T) {
	t.Parallel()
	x := New[int]()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	for i := range 1000 {
		x.Add(i, t0.Add(time.Duration(i)*time.Millisecond))
	}
	odd := func(it Item[int]) bool { return it.Key%2 == 1 } // even items are stale
	n, err := x.Sweep(context.Background(), t0.Add(time.Hour), 300, odd)
	if err != nil || n != 300 {
		t.Fatalf("Sweep(limit 300) = %d, %v", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	visited := 0
	n, err = x.Sweep(ctx, t0.Add(time.Hour), 0, func(it Item[int]) bool {
		if visited++; visited == 10 {
			cancel()
		}
		return odd(it)
	})
	if !errors.Is(err, context.Canceled) || visited != 10 {
		t.Fatalf("cancelled Sweep: %d removed, %d visited, %v", n, visited, err)
	}
	rest, _ := x.Sweep(context.Background(), t0.Add(time.Hour), 0, odd)
	if n+rest != 200 {
		t.Fatalf("after the cancelled sweep %d + %d odd items removed, want the 200 left", n, rest)
	}
}
