package idem

import (
	"context"
)

// runContext is the context an operation runs with: a
// context.WithCancelCause of the caller's, canceled with cause
// ErrLeaseLost when the lease is lost and context.Canceled when the run
// ends, that also answers the reservation's fencing token
// (TokenFromContext) and description (HoldFrom).
type runContext struct {
	context.Context // context.WithCancelCause of the caller's
	cancel          context.CancelCauseFunc
	token           uint64
	held            held
}

type tokenKey struct{}

func newRunContext(parent context.Context, token uint64) runContext {
	ctx, cancel := context.WithCancelCause(parent)
	return runContext{Context: ctx, cancel: cancel, token: token}
}

func (c *runContext) Value(key any) any {
	switch key {
	case tokenKey{}:
		return c.token
	case holdKey{}:
		return &c.held
	}
	return c.Context.Value(key)
}

// end cancels the context with cause (context.Canceled when nil).
func (c *runContext) end(cause error) { c.cancel(cause) }
