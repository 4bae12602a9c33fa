package hooks

import (
	"slices"
	"sync"
	"testing"
)

func TestList(t *testing.T) {
	var l List
	var ran []int
	ids := make([]uint64, 4)
	for i := range ids {
		ids[i] = l.Add(func() { ran = append(ran, i) })
	}
	if !l.Remove(ids[1]) || l.Remove(ids[1]) {
		t.Fatal("Remove: want true once, then false")
	}
	for _, f := range l.Take() {
		f()
	}
	if !slices.Equal(ran, []int{0, 2, 3}) {
		t.Fatalf("ran %v, want [0 2 3]", ran)
	}
	if l.Remove(ids[0]) || l.Take() != nil {
		t.Fatal("the list is not empty after Take")
	}
	// Reused after Take.
	id := l.Add(func() {})
	if !l.Remove(id) {
		t.Fatal("Remove after Take")
	}
}

func TestListAddsInPlace(t *testing.T) {
	var l List
	f := func() {}
	if n := testing.AllocsPerRun(100, func() {
		a, b := l.Add(f), l.Add(f)
		l.Remove(b)
		l.Remove(a)
	}); n != 0 {
		t.Fatalf("%v allocations for two functions, want 0", n)
	}
}

// TestAfterFunc: a function registered before Take is taken by it, and
// stop after Take reports false; one registered after Take runs at once
// on its own goroutine (the caller may hold a lock it takes).
func TestAfterFunc(t *testing.T) {
	var mu sync.Mutex
	var l List
	ran := 0
	stop := l.AfterFunc(&mu, func() { ran++ })
	stopped := l.AfterFunc(&mu, func() { t.Error("a stopped function ran") })
	if !stopped() {
		t.Fatal("stop before Take: false")
	}
	mu.Lock()
	fs := l.Take()
	mu.Unlock()
	for _, f := range fs {
		f()
	}
	if ran != 1 || stop() {
		t.Fatalf("ran %d, stop after Take true", ran)
	}
	late := make(chan struct{})
	var caller sync.Mutex
	caller.Lock() // held around AfterFunc, as the context package holds its own
	if l.AfterFunc(&mu, func() { caller.Lock(); close(late); caller.Unlock() })() {
		t.Error("stop of a late function: true")
	}
	caller.Unlock()
	<-late
}
