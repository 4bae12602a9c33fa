package idemhttp

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-dev/idem"
)

// notComparable is a provider whose type cannot be compared with ==.
type notComparable struct {
	trace.TracerProvider
	_ []int
}

// Tracing is off, and starts no span, while the provider records nothing;
// the global provider is followed when a program sets it. Not parallel:
// it sets the global provider, and leaves a no-op one.
func TestTracingOnlyWithARecordingProvider(t *testing.T) {
	var hash idem.Redactor
	global := newTracing(nil, nil, hash)
	if tr := global.active(); tr != nil {
		t.Fatal("tracing on with the global provider unset")
	}
	if newTracing(noop.NewTracerProvider(), nil, hash).active() != nil {
		t.Fatal("tracing on with a no-op provider")
	}

	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	defer sdk.Shutdown(context.Background())
	if newTracing(sdk, nil, hash).active() == nil {
		t.Fatal("tracing off with an SDK provider")
	}
	if newTracing(notComparable{TracerProvider: sdk}, nil, hash).active() == nil {
		t.Fatal("tracing off with a provider of a type that is not comparable")
	}

	otel.SetTracerProvider(sdk)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	if global.active() == nil {
		t.Fatal("tracing stayed off once the global provider was set")
	}
	otel.SetTracerProvider(notComparable{TracerProvider: sdk})
	for range 2 { // the second call must not compare the two with ==
		if global.active() == nil {
			t.Fatal("tracing off with a global provider of a type that is not comparable")
		}
	}
	otel.SetTracerProvider(noop.NewTracerProvider())
	if global.active() != nil {
		t.Fatal("tracing stayed on once the global provider was a no-op one")
	}
	// Probing starts a span under an unsampled parent and never ends it:
	// nothing of it is exported, even by a sampler that ignores parents.
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("probing exported %d spans", n)
	}
}

// BenchmarkTracingOff is what tracing off adds to a keyed request: finding
// that the global provider, never set, records nothing.
func BenchmarkTracingOff(b *testing.B) {
	t := newTracing(nil, nil, idem.Redactor{})
	b.ReportAllocs()
	for b.Loop() {
		if t.active() != nil {
			b.Fatal("tracing on")
		}
	}
}
