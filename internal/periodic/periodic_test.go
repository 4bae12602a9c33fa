package periodic

import (
	"slices"
	"testing"
	"time"
)

// TestQueue: items fall due one period after they were added, in order;
// Close hands back the rest and refuses more.
func TestQueue(t *testing.T) {
	fired := make(chan []int, 10)
	q := New(50*time.Millisecond, func(due []int) { fired <- due })
	links := make([]Link[int], 2)
	t0 := time.Now()
	if due, ok := q.Add(&links[0], 0); !ok || due.Before(t0.Add(50*time.Millisecond)) {
		t.Fatalf("add 0: %v %v", due, ok)
	}
	time.Sleep(20 * time.Millisecond)
	q.Add(&links[1], 1)
	var got []int
	for len(got) < 2 {
		select {
		case due := <-fired:
			got = append(got, due...)
		case <-time.After(10 * time.Second):
			t.Fatalf("fired %v only", got)
		}
	}
	// The second fell due a period after it was added: 70 ms at least
	// (a lower bound, which a slow machine only makes longer).
	if !slices.Equal(got, []int{0, 1}) || time.Since(t0) < 70*time.Millisecond {
		t.Fatalf("fired %v after %v", got, time.Since(t0))
	}
	if rest := q.Close(); len(rest) != 0 || !q.Closed() {
		t.Fatalf("Close after everything fired: %v", rest)
	}

	// Close, on a queue whose items are far from due (so that none can
	// fire first, however slow the machine).
	long := New(time.Hour, func(due []int) { fired <- due })
	var a, b Link[int]
	long.Add(&a, 2)
	long.Add(&b, 3)
	long.Remove(&a)
	long.Remove(&a) // twice: no effect
	if long.Len() != 1 {
		t.Fatalf("Len after Remove = %d", long.Len())
	}
	if rest := long.Close(); !slices.Equal(rest, []int{3}) || !long.Closed() || long.Len() != 0 {
		t.Fatalf("Close: %v", rest)
	}
	if _, ok := long.Add(&a, 4); ok {
		t.Fatal("Add after Close")
	}
	time.Sleep(80 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired after Close: %v", <-fired)
	}
}

// TestQueueRemove: an item removed before it falls due never fires, while
// the one added after it does. A run in which the machine stalled past the
// item's due time before Remove proves nothing and is tried again.
func TestQueueRemove(t *testing.T) {
	for attempt := 1; ; attempt++ {
		fired := make(chan []int, 10)
		q := New(50*time.Millisecond, func(due []int) { fired <- due })
		var a, b Link[int]
		due, _ := q.Add(&a, 1)
		q.Add(&b, 2)
		q.Remove(&a)
		if !time.Now().Before(due) {
			q.Close()
			if attempt == 50 {
				t.Fatal("50 runs stalled for 50 ms between Add and Remove")
			}
			continue
		}
		select {
		case got := <-fired:
			if !slices.Equal(got, []int{2}) {
				t.Fatalf("fired %v, want [2]: the removed item fired", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("nothing fired")
		}
		q.Close()
		return
	}
}
