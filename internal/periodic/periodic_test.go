package periodic

import (
	"slices"
	"testing"
	"time"
)

// TestQueue: items fall due one period after they were added, in order;
// a removed item never does; Close hands back the rest and refuses more.
func TestQueue(t *testing.T) {
	fired := make(chan []int, 10)
	q := New(50*time.Millisecond, func(due []int) { fired <- due })
	links := make([]Link[int], 4)
	t0 := time.Now()
	for i := range 2 {
		if due, ok := q.Add(&links[i], i); !ok || due.Before(t0.Add(50*time.Millisecond)) {
			t.Fatalf("add %d: %v %v", i, due, ok)
		}
	}
	time.Sleep(20 * time.Millisecond)
	q.Add(&links[2], 2)
	q.Remove(&links[1])
	q.Remove(&links[1]) // twice: no effect
	var got []int
	for len(got) < 2 {
		select {
		case due := <-fired:
			got = append(got, due...)
		case <-time.After(10 * time.Second):
			t.Fatalf("fired %v only", got)
		}
	}
	if !slices.Equal(got, []int{0, 2}) || time.Since(t0) < 70*time.Millisecond {
		t.Fatalf("fired %v after %v", got, time.Since(t0))
	}
	q.Add(&links[3], 3)
	if rest := q.Close(); !slices.Equal(rest, []int{3}) || !q.Closed() || q.Len() != 0 {
		t.Fatalf("Close: %v", rest)
	}
	if _, ok := q.Add(&links[1], 1); ok {
		t.Fatal("Add after Close")
	}
	time.Sleep(80 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired after Close: %v", <-fired)
	}
}
