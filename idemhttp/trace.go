package idemhttp

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-dev/idem"
)

// tracerName is the instrumentation scope of the middleware's spans.
const tracerName = "github.com/idem-dev/idem/idemhttp"

// The attributes of a keyed request's span (the package documentation
// lists them). Scope and key appear only as hashes, printed by the
// engine's idem.Redactor (keyed when the engine was given a keyed one),
// never as they were sent.
const (
	attrOutcome   = attribute.Key("idem.outcome")
	attrWaited    = attribute.Key("idem.waited")
	attrTookOver  = attribute.Key("idem.took_over")
	attrScopeHash = attribute.Key("idem.scope_hash")
	attrKeyHash   = attribute.Key("idem.key_hash")
)

// tracing starts the spans of keyed requests. With no provider that
// records anything (the global one before it is set, or a no-op one) it
// starts none, so that tracing off costs a pointer comparison per request.
type tracing struct {
	explicit *probed                       // the provider of Options.TracerProvider; nil: the global one
	global   atomic.Pointer[probed]        // the global provider last probed
	prop     propagation.TextMapPropagator // nil: the global propagators
	redact   idem.Redactor
}

// probed is a provider and whether its spans exist.
type probed struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
	on     bool
	// comparable: tp's type can be compared with ==, which then never
	// panics whatever the other operand (a provider of a type that
	// cannot is probed again on each request).
	comparable bool
}

func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator, redact idem.Redactor) *tracing {
	t := &tracing{prop: prop, redact: redact}
	if tp != nil {
		t.explicit = probe(tp)
	}
	return t
}

// probeParent is a remote, unsampled span context: a provider that starts
// a span under it gives the span an ID of its own, and one that records
// nothing (the global provider before it is set, trace/noop) hands the
// parent's back. Unsampled, so that a parent-based sampler records
// nothing, and the probe span is never ended, so never exported.
var probeParent = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{0: 1}, SpanID: trace.SpanID{0: 1}, Remote: true,
})

func probe(tp trace.TracerProvider) *probed {
	tr := tp.Tracer(tracerName)
	_, s := tr.Start(trace.ContextWithSpanContext(context.Background(), probeParent), "idem.probe")
	return &probed{tp: tp, tracer: tr, on: s.SpanContext().SpanID() != probeParent.SpanID(),
		comparable: reflect.TypeOf(tp).Comparable()}
}

// active returns the tracer of the provider in use, or nil when it records
// nothing. The global provider can be set at any time: it is read on each
// request and probed again when it changed.
func (t *tracing) active() trace.Tracer {
	p := t.explicit
	if p == nil {
		tp := otel.GetTracerProvider()
		if p = t.global.Load(); p == nil || !p.comparable || p.tp != tp {
			p = probe(tp)
			t.global.Store(p)
		}
	}
	if !p.on {
		return nil
	}
	return p.tracer
}

// spanOf is the span of one keyed request, and what its attributes are
// made of. Its zero value traces nothing.
type spanOf struct {
	span               trace.Span
	scopeHash, keyHash string
	res                idem.Result
}

// start starts r's span, under the span in r's context or else under the
// caller's trace context in its headers, and returns r with it.
func (t *tracing) start(tr trace.Tracer, r *http.Request, rt *route) (*http.Request, spanOf) {
	ctx := r.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		prop := t.prop
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		ctx = prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, sp := tr.Start(ctx, "idem "+rt.Pattern, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("http.route", rt.Pattern), attribute.String("http.request.method", r.Method)))
	return r.WithContext(ctx), spanOf{span: sp}
}

// call notes c's scope and key, hashed.
func (s *spanOf) call(t *tracing, c idem.Call) {
	if s.span == nil || c.Key == "" {
		return
	}
	s.scopeHash = t.redact.Scope(c.Scope)
	s.keyHash = t.redact.Key(c.Scope, c.Key)
}

// end sets the span's outcome and ends it.
func (s *spanOf) end(ev *Event) {
	if s.span == nil {
		return
	}
	outcome := string(ev.Outcome)
	if ev.Outcome == OutcomeRejected {
		outcome = string(ev.Kind)
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attrOutcome.String(outcome), attrWaited.Bool(s.res.Waited))
	if s.res.TookOver {
		attrs = append(attrs, attrTookOver.Bool(true))
	}
	if s.keyHash != "" {
		attrs = append(attrs, attrScopeHash.String(s.scopeHash), attrKeyHash.String(s.keyHash))
	}
	if ev.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", ev.Status))
	}
	s.span.SetAttributes(attrs...)
	if ev.Outcome == OutcomeRejected && ev.Status >= 500 {
		s.span.SetStatus(codes.Error, string(ev.Kind)+" ("+strconv.Itoa(ev.Status)+")")
	}
	s.span.End()
}
