package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

func ended(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// TestCallsAbort: abort cancels the calls in flight, and every call
// started after it at once; calls that ended are not touched.
func TestCallsAbort(t *testing.T) {
	s := newCalls(time.Hour)
	live, endLive := s.start(context.Background())
	done, endDone := s.start(context.Background())
	endDone()
	if s.isAborted() || ended(live) {
		t.Fatal("aborted before abort")
	}
	s.abort()
	select {
	case <-live.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight was not canceled")
	}
	if !errors.Is(live.Err(), context.Canceled) || !errors.Is(done.Err(), context.Canceled) {
		t.Fatalf("the call in flight: %v; the call that ended: %v", live.Err(), done.Err())
	}
	later, endLater := s.start(context.Background())
	if !ended(later) || !s.isAborted() {
		t.Fatal("a call started after abort was not canceled")
	}
	endLater()
	endLive()
}

// TestCallsDeadline: each call ends at its own deadline with
// context.DeadlineExceeded, and so does the Transport's child of it; a
// call that ended first is not touched.
func TestCallsDeadline(t *testing.T) {
	// Deadlines a second apart, half a second between the two calls: the
	// checks between them have that much margin on a loaded machine, and
	// the one that matters most reads the clock itself.
	s := newCalls(time.Second)
	t0 := time.Now()
	first, endFirst := s.start(context.Background())
	early, endEarly := s.start(context.Background())
	time.Sleep(500 * time.Millisecond)
	second, endSecond := s.start(context.Background())
	child, cancel := context.WithCancelCause(second) // as the Transport does
	defer cancel(nil)
	endEarly()
	d2, ok := second.Deadline()
	if !ok || d2.Before(t0.Add(1500*time.Millisecond)) {
		t.Fatalf("deadline %v %v", d2, ok)
	}

	<-first.Done()
	if at := time.Since(t0); at < time.Second || !errors.Is(first.Err(), context.DeadlineExceeded) {
		t.Fatalf("first call ended after %v with %v", at, first.Err())
	}
	if ended(second) && time.Now().Before(d2) {
		t.Fatal("the second call ended with the first")
	}
	if !errors.Is(early.Err(), context.Canceled) {
		t.Fatalf("a call ended by end: %v", early.Err())
	}
	<-child.Done()
	if at := time.Since(t0); at < 1500*time.Millisecond || !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Fatalf("the second call's child ended after %v with cause %v", at, context.Cause(child))
	}
	endFirst()
	endSecond()
}

// TestCallsFollowTheOperation: a call ends when the operation's context
// does (a lost lease), with its cause.
func TestCallsFollowTheOperation(t *testing.T) {
	s := newCalls(time.Hour)
	parent, lose := context.WithCancelCause(context.Background())
	c, end := s.start(parent)
	defer end()
	child, cancel := context.WithCancel(c)
	defer cancel()
	leaseLost := errors.New("lease lost")
	lose(leaseLost)
	if !ended(c) || !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != leaseLost {
		t.Fatalf("after the operation's end: %v, cause %v", c.Err(), context.Cause(c))
	}
	if !ended(child) {
		t.Fatal("the call's child context did not end")
	}
	if already, end := s.start(parent); !ended(already) {
		t.Fatal("a call started under an ended parent is live")
	} else {
		end()
	}
}
