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

// TestAddKeepsOrder checks that an item added some places out of time
// order keeps its bucket sorted, and that one added further out of it, or
// one too many moves, leaves the bucket to be sorted: either way items
// come out every one once, due ones only, in time order.
func TestAddKeepsOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	const n = 2 * insertLimit
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 100 * time.Microsecond) }
	for _, tc := range []struct {
		name   string
		late   []int // items added after all the others, in this order
		sorted bool
	}{
		{"near", []int{n - 3}, true},
		{"at the limit", []int{n - 1 - insertLimit}, true},
		{"far", []int{n - 2 - insertLimit}, false},
		{"several", []int{n - 10, n - 500, n - 20, n - 1000}, true},
		{"too many moves", []int{n/2 + 400, n/2 + 300, n/2 + 200, n/2 + 100, n / 2}, false},
	} {
		x := New[int]()
		late := map[int]bool{}
		for _, i := range tc.late {
			late[i] = true
		}
		for i := range n {
			if !late[i] {
				x.Add(i, at(i))
			}
		}
		for _, i := range tc.late {
			x.Add(i, at(i))
		}
		if b := x.buckets[t0.Unix()]; b.sorted != tc.sorted {
			t.Errorf("%s: sorted = %v, want %v", tc.name, b.sorted, tc.sorted)
		}
		got := x.Take(at(n/2), n)
		if len(got) != n/2+1 {
			t.Fatalf("%s: took %d items due at item %d, want %d", tc.name, len(got), n/2, n/2+1)
		}
		for i, it := range got {
			if it.Key != i {
				t.Fatalf("%s: item %d is %d, want items in time order", tc.name, i, it.Key)
			}
		}
		rest := x.Take(t0.Add(time.Hour), n)
		seen := map[int]bool{}
		for _, it := range rest {
			seen[it.Key] = true
		}
		for i := n/2 + 1; i < n; i++ {
			if !seen[i] {
				t.Fatalf("%s: item %d lost", tc.name, i)
			}
		}
		if len(rest) != n/2-1 {
			t.Fatalf("%s: %d items left, want the %d later ones once each", tc.name, len(rest), n/2-1)
		}
	}
}

// TestNewBucketRoom checks that a new second's bucket starts with room for
// as many items as the bucket made before it received, also once that one
// was emptied, and that an emptied bucket is not kept for its count.
func TestNewBucketRoom(t *testing.T) {
	t.Parallel()
	x := New[int]()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	for i := range 300 {
		x.Add(i, t0.Add(time.Duration(i)*time.Millisecond))
	}
	x.Add(300, t0.Add(time.Second))
	if c := cap(x.buckets[t0.Unix()+1].items); c != 300 {
		t.Fatalf("second bucket's room: %d, want 300", c)
	}
	if got := x.Take(t0.Add(time.Hour), 1000); len(got) != 301 {
		t.Fatalf("took %d items, want 301", len(got))
	}
	if x.newest != nil {
		t.Fatal("an emptied bucket is still kept")
	}
	x.Add(301, t0.Add(5*time.Second))
	if c := cap(x.buckets[t0.Unix()+5].items); c != 1 {
		t.Fatalf("room after the emptied bucket of 1 item: %d, want 1", c)
	}
}
