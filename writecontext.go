package idem

import (
	"context"
	"sync"
	"time"
)

// writeContext is what context.WithTimeout(context.WithoutCancel(parent),
// d) gives the store writes that end a call (endWrite): the parent's values,
// no cancellation, a deadline. It makes the Done channel and its timer
// only when a store asks for Done: a store that only checks Err (the
// memory store) writes every outcome without them, where WithTimeout makes
// a timer and three more allocations on every first execution.
type writeContext struct {
	parent   context.Context // for Value only
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // made on the first Done; guarded by mu
	timer *time.Timer   // closes done at the deadline; guarded by mu
	err   error         // set when done is closed; guarded by mu
}

func newWriteContext(parent context.Context, d time.Duration) *writeContext {
	// WithoutCancel hides the parent's cancelation from Value too:
	// context.Cause looks for it there.
	return &writeContext{parent: context.WithoutCancel(parent), deadline: time.Now().Add(d)}
}

func (c *writeContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *writeContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if d := time.Until(c.deadline); d <= 0 {
			c.expireLocked()
		} else {
			c.timer = time.AfterFunc(d, c.expire)
		}
	}
	return c.done
}

func (c *writeContext) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked()
}

func (c *writeContext) expireLocked() {
	if c.err == nil {
		c.err = context.DeadlineExceeded
		close(c.done)
	}
}

// Err is nil until the deadline; once Done was asked for, until it is
// closed, so that the two always agree.
func (c *writeContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *writeContext) Value(key any) any { return c.parent.Value(key) }

// stop releases the timer, as WithTimeout's cancel does.
func (c *writeContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}
