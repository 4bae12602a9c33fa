package gateway

import (
	"context"
	"time"
)

// calls are the upstream calls in flight: each under the upstream
// deadline, all of them for Abort to cut off.
type calls struct {
	deadline time.Duration
	aborted  context.Context // canceled by abort
	abort    context.CancelFunc
}

func newCalls(deadline time.Duration) calls {
	ctx, cancel := context.WithCancel(context.Background())
	return calls{deadline: deadline, aborted: ctx, abort: cancel}
}

// start starts a call under parent: its context ends at the deadline, on
// Abort, when parent ends, or when the returned end is called.
func (s calls) start(parent context.Context) (ctx context.Context, end func()) {
	ctx, cancel := context.WithTimeout(parent, s.deadline)
	if s.aborted.Err() != nil {
		cancel()
		return ctx, cancel
	}
	stop := context.AfterFunc(s.aborted, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// isAborted reports whether abort was called.
func (s calls) isAborted() bool { return s.aborted.Err() != nil }
