package idemconnect

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/idem-dev/idem/idemwire"
	"github.com/idem-dev/idem/rpc/internal/core"
)

// ClientOptions configure NewClientInterceptor.
type ClientOptions struct {
	// NewKey makes the key of a call that has none; nil means a random
	// UUID. A call carries one key for all its attempts.
	NewKey func() string
	// MaxAttempts bounds the attempts per call; 0 means 4.
	MaxAttempts int
	// Backoff is the wait before attempt n+1 (n >= 1) when the server
	// named none (RetryInfo); nil means 100 ms doubling up to 5 s, with
	// jitter.
	Backoff func(n int) time.Duration
}

// NewClientInterceptor returns the client-side interceptor: each unary
// call gets an Idempotency-Key header (the one it has, else a new one) and
// is sent again with it while the answer says nothing ran or no outcome is
// known yet: any error the server did not send (a lost connection, or an
// answer cut off: Connect reports those as Unavailable, Internal or
// Unknown, and connect.IsWireError tells them from the server's own),
// Unavailable and ResourceExhausted, and idem's in_progress (after its
// RetryInfo), store_unavailable and outcome_not_recorded. Every other answer is the call's outcome, idem's
// conflicts included (FailedPrecondition: ProblemKind names them).
// Streaming calls pass through untouched.
func NewClientInterceptor(o ClientOptions) connect.Interceptor { return &client{o: o} }

type client struct{ o ClientOptions }

func (c *client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (c *client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		if req.Header().Get(idemwire.HeaderName) == "" {
			key := idemwire.NewKey()
			if c.o.NewKey != nil {
				key = c.o.NewKey()
			}
			req.Header().Set(idemwire.HeaderName, key)
		}
		var res connect.AnyResponse
		var err error
		core.Attempts(ctx, c.o.MaxAttempts, c.o.Backoff, func() (core.Verdict, time.Duration) {
			if res, err = next(ctx, req); err == nil {
				return core.Final, 0
			}
			v, _, wait := core.Classify(core.Code(connect.CodeOf(err)), details(err))
			if v == core.Final && !connect.IsWireError(err) && ctx.Err() == nil {
				v = core.Retry // no answer from the server: sent again with the key
			}
			return v, wait
		})
		return res, err
	}
}
