package idem

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWriteContext holds writeContext to context.WithTimeout(
// context.WithoutCancel(parent), d): the parent's values, never its
// cancellation, Err and Done agreeing at the deadline whether Done was
// asked for before it, after it or never.
func TestWriteContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	cancel(errors.New("the client hung up"))

	c := newWriteContext(parent, 50*time.Millisecond)
	defer c.stop()
	if c.Value(key{}) != "v" {
		t.Error("the parent's value is lost")
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) > 50*time.Millisecond {
		t.Errorf("deadline %v %v", d, ok)
	}
	if c.Err() != nil || context.Cause(c) != nil {
		t.Fatalf("canceled with its parent: %v, cause %v", c.Err(), context.Cause(c))
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("done before the deadline")
	default:
	}
	if c.Err() != nil {
		t.Fatal("Err before Done is closed")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || c.Done() != done {
		t.Errorf("after the deadline: %v", c.Err())
	}
	// Not the parent's cause: context.Cause finds a cancelation through
	// Value.
	if cause := context.Cause(c); !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("cause after the deadline: %v", cause)
	}

	// Never asked for Done: Err alone tells the deadline; a Done asked for
	// late is closed at once.
	late := newWriteContext(context.Background(), time.Millisecond)
	defer late.stop()
	time.Sleep(5 * time.Millisecond)
	if !errors.Is(late.Err(), context.DeadlineExceeded) {
		t.Errorf("Err past the deadline: %v", late.Err())
	}
	select {
	case <-late.Done():
	default:
		t.Error("a late Done is not closed")
	}

	// A store that derives its own context from it still gets the deadline.
	child, cancelChild := context.WithCancel(newWriteContext(context.Background(), 10*time.Millisecond))
	defer cancelChild()
	select {
	case <-child.Done():
		if !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Errorf("child: %v", child.Err())
		}
	case <-time.After(5 * time.Second):
		t.Error("a child context never ends")
	}

	if n := testing.AllocsPerRun(100, func() {
		c := newWriteContext(parent, time.Second)
		_ = c.Err()
		c.stop()
	}); n > 2 {
		t.Errorf("%v allocations without Done, want 2", n)
	}
}
