package consume

import (
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultDrainTimeout is how long handlers running when a consumer is
// told to stop may go on (the adapters' DrainTimeout default).
const DefaultDrainTimeout = 30 * time.Second

// ErrDrainTimeout is the cause of a handler's context that ended because
// the consumer stopped and the drain's bound ran out.
var ErrDrainTimeout = errors.New("trigger: consumer stopped and its drain timeout ran out")

// Drain lets the handlers that run when a consumer is told to stop finish
// and be acked. Handlers get a context that does not end with the
// consumer's (a handler cut off half-way may have had its effect and then
// be redelivered), but ends timeout after it, so that a stop is bounded.
// A message that comes after the stop is not begun: it goes back to the
// broker for another replica.
type Drain struct {
	parent  context.Context // the consumer's
	ctx     context.Context // the handlers'
	cancel  context.CancelCauseFunc
	timeout time.Duration
	after   func() bool // stops the AfterFunc on the consumer's context

	mu      sync.Mutex
	stopped bool        // the consumer's context ended; guarded by mu
	timer   *time.Timer // ends ctx; guarded by mu
	running sync.WaitGroup
}

// NewDrain returns the drain of a consumer that runs until ctx ends; its
// handlers may go on for timeout after that (no time at all if timeout is
// negative). Call Wait when the consumer stops.
func NewDrain(ctx context.Context, timeout time.Duration) *Drain {
	d := &Drain{parent: ctx, timeout: timeout}
	// The handlers' context keeps ctx's values, not its end.
	d.ctx, d.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	d.after = context.AfterFunc(ctx, d.stop)
	return d
}

// stop starts the drain's bound; the consumer's context has ended.
func (d *Drain) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timeout <= 0 {
		d.cancel(ErrDrainTimeout)
		return
	}
	d.timer = time.AfterFunc(d.timeout, func() { d.cancel(ErrDrainTimeout) })
}

// Begin registers a handler about to run and returns its context. It
// returns false, and registers nothing, once the consumer was told to stop:
// the message must go back to the broker. Call End when the handler and
// its ack are done.
func (d *Drain) Begin() (context.Context, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.parent.Err() != nil { // stop may be on its way
		return nil, false
	}
	d.running.Add(1)
	return d.ctx, true
}

// End marks a handler begun by Begin as done.
func (d *Drain) End() { d.running.Done() }

// Wait waits for the handlers that are running to end (those running past
// the bound see their context end), then releases the drain. Call it once
// the consumer starts no more handlers.
func (d *Drain) Wait() {
	d.running.Wait()
	d.after()
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.stopped = true
	d.mu.Unlock()
	d.cancel(context.Canceled)
}
