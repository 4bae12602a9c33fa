package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/idem-dev/idem/internal/hooks"
	"github.com/idem-dev/idem/internal/periodic"
)

// calls are the upstream calls in flight: each under the upstream
// deadline, all of them for Abort to cut off. Every call gets the same
// deadline, so one timer serves them all (internal/periodic), and
// starting or ending a call is a link or an unlink under one lock.
// context.WithTimeout per call made a timer and, below the operation's
// context, the cancelable part of that context and a map of children for
// each (BenchmarkGateway's allocations: docs/bench/GATEWAY.md).
type calls struct {
	q *periodic.Queue[*callCtx] // closed by abort
}

func newCalls(deadline time.Duration) calls {
	return calls{q: periodic.New(deadline, func(due []*callCtx) {
		for _, c := range due {
			c.cancel(context.DeadlineExceeded)
		}
	})}
}

// start starts a call under parent: its context ends at the deadline, on
// Abort, when parent ends, or when end is called.
func (s calls) start(parent context.Context) *callCtx {
	c := &callCtx{parent: parent, done: make(chan struct{})}
	var listed bool
	if c.deadline, listed = s.q.Add(&c.link, c); !listed {
		c.cancel(context.Canceled) // after abort
		return c
	}
	// The operation's context (a lost lease) ends the call too. Its
	// AfterFunc, called directly, keeps the function without making the
	// cancelable context that Done, or context.AfterFunc, would make.
	if a, ok := parent.(interface{ AfterFunc(func()) func() bool }); ok {
		c.stopParent = a.AfterFunc(c.parentDone)
	} else if parent.Done() != nil {
		c.stopParent = context.AfterFunc(parent, c.parentDone)
	}
	if err := parent.Err(); err != nil {
		c.cancel(err)
	}
	return c
}

// end takes an ended call out, and cancels its context as
// WithTimeout's cancel does.
func (s calls) end(c *callCtx) {
	if c.stopParent != nil {
		c.stopParent()
	}
	s.q.Remove(&c.link)
	c.cancel(context.Canceled)
}

// abort cancels every call in flight and every call started later.
func (s calls) abort() {
	// Outside the queue's lock: a cancel runs the context's children's.
	for _, c := range s.q.Close() {
		c.cancel(context.Canceled)
	}
}

// isAborted reports whether abort was called.
func (s calls) isAborted() bool { return s.q.Closed() }

// callCtx is the context of one upstream call: the operation's values,
// ended by the upstream deadline, Abort, the operation's end or the end of
// the call. It is what context.WithTimeout(parent, deadline) was, for
// less: two allocations (itself and Done's channel) and a link in calls,
// where WithTimeout made a timer, and, through Done on the operation's
// context, that context's cancelable part; the Transport's own child
// context registers a function here (AfterFunc) instead of going in a map
// of children.
type callCtx struct {
	parent     context.Context
	deadline   time.Time     // set by start only
	done       chan struct{} // closed by cancel
	stopParent func() bool   // set by start only
	link       periodic.Link[*callCtx]

	mu    sync.Mutex
	err   error      // guarded by mu; set when done is closed
	hooks hooks.List // guarded by mu
}

func (c *callCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *callCtx) Done() <-chan struct{} { return c.done }

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value answers from the parent. context.Cause finds the parent's
// cancelation through it when the parent was canceled with a cause, and
// otherwise answers Err, as it does for a context of its own making.
func (c *callCtx) Value(key any) any { return c.parent.Value(key) }

// AfterFunc is the method context.AfterFunc, and a child context made by
// the context package, look for: f is called when c is canceled.
func (c *callCtx) AfterFunc(f func()) func() bool { return c.hooks.AfterFunc(&c.mu, f) }

func (c *callCtx) parentDone() { c.cancel(c.parent.Err()) }

// cancel ends c with err, unless it has ended, and calls the functions
// registered on it.
func (c *callCtx) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	fs := c.hooks.Take()
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
