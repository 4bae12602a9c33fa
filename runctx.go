package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/internal/hooks"
)

// runContext is the context an operation runs with: the caller's context,
// the reservation's fencing token (TokenFromContext) and description
// (HoldFrom), and a cancelation of its own, with cause ErrLeaseLost when
// the lease is lost and context.Canceled when the run ends.
//
// The cancelable context (context.WithCancelCause of the caller's) is made
// only when something needs it: Done, or a lost lease while the operation
// runs. Below a net/http handler WithCancelCause registers the new context
// with the request's, which allocates a map; an operation that never
// selects on its context's Done is spared that (docs/bench/ENGINE.md). An
// operation that does call Done pays what it did before.
//
// Until it is made, Err and Cause answer as the made context would: the
// caller's error and cause while the caller's context ends first, and
// context.Canceled once the run has ended.
type runContext struct {
	parent context.Context
	token  uint64
	held   held

	made  atomic.Bool // inner and cancel are set; never unset
	ended atomic.Bool // canceled before inner was made, caller's context live then

	mu     sync.Mutex
	inner  context.Context         // set under mu before made
	cancel context.CancelCauseFunc // set under mu before made
	hooks  hooks.List              // AfterFunc's, while the caller's context cannot end; guarded by mu
}

type tokenKey struct{}

func (c *runContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *runContext) Done() <-chan struct{} { return c.get().Done() }

func (c *runContext) Err() error {
	switch {
	case c.made.Load():
		return c.inner.Err()
	case c.ended.Load():
		return context.Canceled
	}
	return c.parent.Err()
}

func (c *runContext) Value(key any) any {
	switch key {
	case tokenKey{}:
		return c.token
	case holdKey{}:
		return &c.held
	}
	switch {
	case c.made.Load():
		return c.inner.Value(key)
	case c.ended.Load():
		// context.Cause finds the cancelation through Value: it must find
		// the ended one, not the caller's.
		return c.get().Value(key)
	}
	return c.parent.Value(key)
}

// get returns the cancelable context, made on first use.
func (c *runContext) get() context.Context {
	if c.made.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() {
		c.makeLocked()
	}
	return c.inner
}

// makeLocked makes the cancelable context; c.mu is held. A run that has
// ended gets one canceled already, apart from the caller's context, whose
// later end must not change its error.
func (c *runContext) makeLocked() {
	if c.ended.Load() {
		c.inner, c.cancel = context.WithCancelCause(context.WithoutCancel(c.parent))
		c.cancel(nil)
	} else {
		c.inner, c.cancel = context.WithCancelCause(c.parent)
	}
	c.made.Store(true)
}

// AfterFunc is the method context.AfterFunc looks for. A context made
// from the run's that calls it directly (the gateway's upstream call, see
// internal/gateway) follows the run's end without making the cancelable
// context, where Done would: while the caller's context can never end (the
// gateway detached it from the client), f is kept here and called when the
// run ends or loses its lease. Otherwise f goes on the cancelable context.
func (c *runContext) AfterFunc(f func()) (stop func() bool) {
	if c.parent.Done() != nil {
		return context.AfterFunc(c.get(), f)
	}
	return c.hooks.AfterFunc(&c.mu, f)
}

// end cancels the context with cause (context.Canceled when nil), then
// calls the functions AfterFunc kept.
func (c *runContext) end(cause error) {
	c.mu.Lock()
	if fs := c.hooks.Take(); fs != nil {
		defer func() {
			for _, f := range fs {
				f()
			}
		}()
	}
	switch {
	case c.made.Load():
	case cause == nil && c.parent.Err() == nil:
		// Nothing has looked at Done: remember the end instead of making
		// a context only to cancel it.
		c.ended.Store(true)
		c.mu.Unlock()
		return
	case cause == nil:
		// The caller's context ended first: its error stands, as it would
		// in a context made from it.
		c.mu.Unlock()
		return
	default:
		c.makeLocked()
	}
	c.mu.Unlock()
	c.cancel(cause)
}
