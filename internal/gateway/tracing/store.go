package tracing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-dev/idem/store"
)

// scopeName is the instrumentation scope of the store spans.
const scopeName = "github.com/idem-dev/idem/internal/gateway/tracing"

// WrapStore returns s with a span around each operation made within a
// trace ("idem.store reserve", ...). The wrapper's Unwrap returns s, so
// that optional capabilities (store.NotifierOf) are still found.
func WrapStore(s store.Store, tp trace.TracerProvider) store.Store {
	return &traced{s: s, tr: tp.Tracer(scopeName)}
}

// traced keeps one thin method per store operation: the work is in start
// and end, so that a change of the store's method signatures changes one
// line each.
type traced struct {
	s  store.Store
	tr trace.Tracer
}

var _ store.Store = (*traced)(nil)

// Unwrap returns the traced store.
func (t *traced) Unwrap() store.Store { return t.s }

var opKey = attribute.Key("idem.store.operation")

// start starts the span of operation op, or returns nil outside a trace.
func (t *traced) start(ctx context.Context, op string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return t.tr.Start(ctx, "idem.store "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(opKey.String(op)))
}

// end ends sp with err's outcome and returns err. A missing record and a
// lost lease are answers, not failures of the store.
func end(sp trace.Span, err error) error {
	if sp == nil {
		return err
	}
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		sp.SetAttributes(attribute.String("idem.store.result", "not_found"))
	case errors.Is(err, store.ErrLeaseLost):
		sp.SetAttributes(attribute.String("idem.store.result", "lease_lost"))
	default:
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
	return err
}

func (t *traced) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	ctx, sp := t.start(ctx, "reserve")
	r, err := t.s.Reserve(ctx, req)
	if sp != nil && err == nil {
		sp.SetAttributes(attribute.Bool("idem.store.acquired", r.Acquired))
		if !r.Acquired {
			sp.SetAttributes(attribute.String("idem.store.existing_state", string(r.Existing.State)))
		}
	}
	return r, end(sp, err)
}

func (t *traced) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	ctx, sp := t.start(ctx, "get")
	r, err := t.s.Get(ctx, scope, keyHash)
	return r, end(sp, err)
}

func (t *traced) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	ctx, sp := t.start(ctx, "renew")
	return end(sp, t.s.Renew(ctx, f, lease))
}

func (t *traced) Complete(ctx context.Context, c store.Completion) error {
	ctx, sp := t.start(ctx, "complete")
	return end(sp, t.s.Complete(ctx, c))
}

func (t *traced) Release(ctx context.Context, f store.Fence) error {
	ctx, sp := t.start(ctx, "release")
	return end(sp, t.s.Release(ctx, f))
}

func (t *traced) Cleanup(ctx context.Context, limit int) (int, error) {
	ctx, sp := t.start(ctx, "cleanup")
	n, err := t.s.Cleanup(ctx, limit)
	return n, end(sp, err)
}

func (t *traced) Close() error { return t.s.Close() }
