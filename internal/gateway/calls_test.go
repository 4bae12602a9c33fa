package gateway

import (
	"context"
	"testing"
)

// TestCallsAbort: abort cancels the calls still in the list, not the ones
// removed, and every call added after it at once.
func TestCallsAbort(t *testing.T) {
	var s calls
	ctxs := make([]context.Context, 4)
	cs := make([]*call, 4)
	for i := range ctxs {
		var cancel context.CancelFunc
		ctxs[i], cancel = context.WithCancel(context.Background())
		cs[i] = s.add(cancel)
	}
	// Out of the list: the head, one in the middle, and the tail.
	s.remove(cs[3])
	s.remove(cs[1])
	s.remove(cs[0])
	if s.isAborted() {
		t.Fatal("aborted before abort")
	}
	s.abort()
	for i, want := range []bool{false, false, true, false} {
		if got := ctxs[i].Err() != nil; got != want {
			t.Errorf("call %d canceled: %v, want %v", i, got, want)
		}
	}
	later, cancel := context.WithCancel(context.Background())
	s.remove(s.add(cancel))
	s.remove(cs[2])
	if later.Err() == nil || !s.isAborted() {
		t.Fatal("a call added after abort was not canceled")
	}
	if s.head != nil {
		t.Fatal("the list is not empty after every call was removed")
	}
}
