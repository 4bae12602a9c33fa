package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
)

// BenchmarkMiddleware measures the middleware in process, on the memory
// store, against the bare handler as the baseline: a first execution (a new
// key every request) and a replay (one of 1024 known keys).
//
// First executions run on a store in its steady state: records expire after
// 250 ms and are cleaned up every 25 ms, as a long-running gateway's records
// expire after their TTL. A store that only grew would measure the garbage
// collector scanning every record kept so far, a cost that depends on how
// long the benchmark ran rather than on the request.
func BenchmarkMiddleware(b *testing.B) { benchMiddleware(b, nil) }

// BenchmarkMiddlewareTraced is BenchmarkMiddleware with tracing on: every
// keyed request's span sampled, batched and handed to an exporter that
// drops it. BenchmarkMiddleware itself runs with tracing off (the global
// provider, never set), which is what it costs an application that does
// not trace.
func BenchmarkMiddlewareTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	benchMiddleware(b, tp)
}

func benchMiddleware(b *testing.B, tp trace.TracerProvider) {
	const body = `{"amount":1000,"currency":"eur","customer":"cus_123"}`
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`))
	})
	newMW := func(b *testing.B, p idem.Policy) http.Handler {
		eng := idem.New(memory.New(), p)
		b.Cleanup(func() { eng.Close() })
		return idemhttp.Middleware(eng, idemhttp.Options{Logger: quiet, TracerProvider: tp})(handler)
	}
	serve := func(b *testing.B, h http.Handler, key func(i int64) string) {
		b.ReportAllocs()
		var seq atomic.Int64
		// CPU per request beside ns/op: ns/op runs on both cores at once
		// and moves with whatever else the machine runs.
		cpu0 := testkit.ProcessCPU()
		defer func() { b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk_bench")
				if key != nil {
					req.Header.Set("Idempotency-Key", key(seq.Add(1)))
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
	b.Run("baseline", func(b *testing.B) { serve(b, handler, nil) })
	b.Run("first", func(b *testing.B) {
		h := newMW(b, idem.Policy{TTL: 250 * time.Millisecond, Lease: 250 * time.Millisecond, CleanupInterval: 25 * time.Millisecond})
		serve(b, h, func(i int64) string { return "first-" + strconv.FormatInt(i, 10) })
	})
	b.Run("replay", func(b *testing.B) {
		h := newMW(b, idem.Policy{CleanupInterval: -1})
		key := func(i int64) string { return "replay-" + strconv.FormatInt(i%1024, 10) }
		for i := range int64(1024) {
			req := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key(i))
			req.Header.Set("Authorization", "Bearer sk_bench")
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		serve(b, h, key)
	})
}
