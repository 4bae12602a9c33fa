package idemgrpc

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idem-dev/idem/idemwire"
	"github.com/idem-dev/idem/rpc/internal/core"
)

// ClientOptions configure UnaryClientInterceptor.
type ClientOptions struct {
	// NewKey makes the key of a call that has none; nil means a random
	// UUID. A call carries one key for all its attempts.
	NewKey func() string
	// MaxAttempts bounds the interceptor's attempts per call; 0 means 4.
	// 1 leaves every retry to grpc-go's retry policy (service config):
	// its attempts resend the same metadata, so they carry the same key.
	MaxAttempts int
	// Backoff is the wait before attempt n+1 (n >= 1) when the server
	// named none (RetryInfo); nil means 100 ms doubling up to 5 s, with
	// jitter.
	Backoff func(n int) time.Duration
}

// WithKey returns ctx with key as the next call's idempotency key: one
// key per user intent, reused when the caller sends the intent again.
func WithKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, core.KeyName, key)
}

// UnaryClientInterceptor gives each unary call an idempotency key (the one
// in the outgoing metadata, else a new one) and calls again with it while
// the answer says nothing ran or no outcome is known yet: Unavailable (a
// lost connection, or a lost answer), ResourceExhausted, and idem's
// in_progress (after its RetryInfo), store_unavailable and
// outcome_not_recorded. Every other answer is the call's outcome, idem's
// conflicts included (FailedPrecondition: ProblemKind names them).
//
// With a retry policy in the service config, grpc-go retries inside each
// attempt with the same metadata, hence the same key; set MaxAttempts to 1
// to leave retries to it alone, and list UNAVAILABLE and ABORTED in its
// retryableStatusCodes: idem's in_progress (ABORTED) carries the
// grpc-retry-pushback-ms trailer that makes grpc-go wait as the server
// asks.
func UnaryClientInterceptor(o ClientOptions) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if len(md.Get(core.KeyName)) == 0 {
			key := idemwire.NewKey()
			if o.NewKey != nil {
				key = o.NewKey()
			}
			ctx = WithKey(ctx, key)
		}
		var err error
		core.Attempts(ctx, o.MaxAttempts, o.Backoff, func() (core.Verdict, time.Duration) {
			if err = invoker(ctx, method, req, reply, cc, opts...); err == nil {
				return core.Final, 0
			}
			st, _ := status.FromError(err)
			v, _, wait := core.Classify(core.Code(st.Code()), details(st))
			return v, wait
		})
		return err
	}
}

// ProblemKind returns the kind of idem's answer err is
// (docs/problems.md: "in_progress", "payload_mismatch", "key_reused",
// "previous_failure", "outcome_unknown", "store_unavailable", ...), read
// from its google.rpc.ErrorInfo, or "" when err is not one of idem's.
func ProblemKind(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	_, kind, _ := core.Classify(core.Code(st.Code()), details(st))
	return kind
}

func details(st *status.Status) []proto.Message {
	var out []proto.Message
	for _, d := range st.Details() {
		if m, ok := d.(proto.Message); ok {
			out = append(out, m)
		}
	}
	return out
}
