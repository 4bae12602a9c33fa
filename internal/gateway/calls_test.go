package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/hooks"
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
// started after it at once; calls that ended are out of the list.
func TestCallsAbort(t *testing.T) {
	s := newCalls(time.Hour)
	cs := make([]*callCtx, 4)
	for i := range cs {
		cs[i] = s.start(context.Background())
	}
	// Out of the list: the head, one in the middle, and the tail.
	s.end(cs[3])
	s.end(cs[1])
	s.end(cs[0])
	if s.isAborted() || ended(cs[2]) {
		t.Fatal("aborted before abort")
	}
	s.abort()
	if !ended(cs[2]) || !errors.Is(cs[2].Err(), context.Canceled) {
		t.Fatalf("the call in flight: %v", cs[2].Err())
	}
	later := s.start(context.Background())
	if !ended(later) || !s.isAborted() {
		t.Fatal("a call started after abort was not canceled")
	}
	s.end(later)
	s.end(cs[2])
	if s.q.Len() != 0 {
		t.Fatal("the list is not empty after every call ended")
	}
}

// TestCallsDeadline: each call ends at its own deadline, in start order,
// with context.DeadlineExceeded, and so does the Transport's child of it;
// a call that ended first is not touched, and one timer serves them all.
func TestCallsDeadline(t *testing.T) {
	// Deadlines a second apart, half a second between the two calls: the
	// checks between them have that much margin on a loaded machine, and
	// the one that matters most reads the clock itself.
	s := newCalls(time.Second)
	t0 := time.Now()
	first := s.start(context.Background())
	early := s.start(context.Background())
	time.Sleep(500 * time.Millisecond)
	second := s.start(context.Background())
	child, cancel := context.WithCancelCause(second) // as the Transport does
	defer cancel(nil)
	s.end(early)
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
	s.end(first)
	s.end(second)
	if s.q.Len() != 0 {
		t.Fatal("calls left in the list")
	}
}

// runLike is a parent context with the AfterFunc method of the engine's
// operation context; its Done must not be called (that would make the
// cancelable part the method exists to spare).
type runLike struct {
	context.Context
	hooks hooks.List
	err   error
}

func (r *runLike) Done() <-chan struct{} { panic("Done called on the operation's context") }
func (r *runLike) Err() error            { return r.err }
func (r *runLike) AfterFunc(f func()) func() bool {
	id := r.hooks.Add(f)
	return func() bool { return r.hooks.Remove(id) }
}

func (r *runLike) end(err error) {
	r.err = err
	for _, f := range r.hooks.Take() {
		f()
	}
}

// TestCallsFollowTheOperation: a call ends when the operation's context
// does (a lost lease), through its AfterFunc method; a call that ended
// unregisters from it.
func TestCallsFollowTheOperation(t *testing.T) {
	s := newCalls(time.Hour)
	parent := &runLike{Context: context.Background()}
	done := s.start(parent)
	s.end(done)
	c := s.start(parent)
	child, cancel := context.WithCancel(c)
	defer cancel()
	leaseLost := errors.New("lease lost")
	parent.end(leaseLost)
	if !ended(c) || c.Err() != leaseLost {
		t.Fatalf("after the operation's end: %v", c.Err())
	}
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call's child context did not end")
	}
	s.end(c)

	// A standard parent that can end.
	std, stop := context.WithCancel(context.Background())
	c = s.start(std)
	stop()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not follow its parent")
	}
	s.end(c)
	if already := s.start(std); !ended(already) {
		t.Fatal("a call started under an ended parent is live")
	}
}

// TestCallsCost: starting and ending a call under the operation's
// context makes four allocations (the context, its Done channel, the
// function and stop it registers with the operation's context), and a
// child context like the Transport's five more. WithTimeout, with the
// operation's cancelable part it made, took 15 for both (the count of
// TestCallsCost's calls with a child, written that way).
func TestCallsCost(t *testing.T) {
	s := newCalls(time.Hour)
	parent := &runLike{Context: context.Background()}
	if n := testing.AllocsPerRun(200, func() { s.end(s.start(parent)) }); n > 4 {
		t.Errorf("a call: %v allocations", n)
	}
	if n := testing.AllocsPerRun(200, func() {
		c := s.start(parent)
		_, cancel := context.WithCancel(c)
		cancel()
		s.end(c)
	}); n > 9 {
		t.Errorf("a call with a child: %v allocations", n)
	}
}
