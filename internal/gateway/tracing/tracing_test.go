package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestFromEnvOff(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		nil,
		{"OTEL_SERVICE_NAME", "gw"}, // no exporter configured
		{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"},
		{"OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"},
	} {
		s, err := FromEnv(context.Background(), envOf(env...), "test")
		if err != nil || s.TracerProvider != nil {
			t.Errorf("%q: provider %v, err %v; want tracing off", env, s, err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("%q: Shutdown of tracing off: %v", env, err)
		}
	}
}

func TestFromEnvOn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env                       []string
		endpoint, service, sample string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"}, "http://127.0.0.1:4318/v1/traces", "idem", "parentbased_always_on"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:4318/custom", "OTEL_SERVICE_NAME", "gw-eu",
			"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"}, "https://collector:4318/custom", "gw-eu", "parentbased_traceidratio 0.25"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_TRACES_SAMPLER", "always_off", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}, "http://localhost:4318/v1/traces", "idem", "always_off"},
	} {
		s, err := FromEnv(context.Background(), envOf(c.env...), "test")
		if err != nil {
			t.Fatalf("%q: %v", c.env, err)
		}
		if s.TracerProvider == nil || s.Endpoint != c.endpoint || s.Service != c.service || s.Sampler != c.sample {
			t.Errorf("%q: provider %v endpoint %q service %q sampler %q", c.env, s.TracerProvider, s.Endpoint, s.Service, s.Sampler)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("%q: Shutdown: %v", c.env, err)
		}
		cancel()
	}
}

// A setting that cannot mean what was written is refused at start, and the
// error names the variable.
func TestFromEnvRefuses(t *testing.T) {
	t.Parallel()
	ep := []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}
	for _, c := range []struct {
		env  []string
		name string
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp,console"}, "OTEL_TRACES_EXPORTER"},
		{append([]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, ep...), "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{append([]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"}, ep...), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{append([]string{"OTEL_TRACES_SAMPLER", "sometimes"}, ep...), "OTEL_TRACES_SAMPLER"},
		{append([]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1.5"}, ep...), "OTEL_TRACES_SAMPLER_ARG"},
		{append([]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "half"}, ep...), "OTEL_TRACES_SAMPLER_ARG"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "grpc://collector:4317"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{[]string{"OTEL_PROPAGATORS", "tracecontext,b3"}, "OTEL_PROPAGATORS"},
		{[]string{"OTEL_SDK_DISABLED", "yes"}, "OTEL_SDK_DISABLED"},
	} {
		s, err := FromEnv(context.Background(), envOf(c.env...), "test")
		if err == nil {
			s.Shutdown(context.Background())
			t.Errorf("%q accepted", c.env)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("%q: error %q does not name %s", c.env, err, c.name)
		}
	}
}

func TestWrapStoreSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	inner := memory.New()
	s := WrapStore(inner, tp)
	if u, ok := s.(interface{ Unwrap() store.Store }); !ok || u.Unwrap() != inner {
		t.Fatal("the wrapper does not unwrap to the store")
	}

	req := store.ReserveRequest{Lease: time.Minute, TTL: time.Hour, Record: store.Record{
		KeyHash: store.HashKey("s", "k"), Scope: "s", Key: "k", State: store.InProgress, Token: 7,
	}}
	// Outside a trace: no span.
	if _, err := s.Get(context.Background(), "s", req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans outside any trace", n)
	}

	ctx, parent := tp.Tracer("test").Start(context.Background(), "call")
	if _, err := s.Get(ctx, "s", req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
	if r, err := s.Reserve(ctx, req); err != nil || !r.Acquired {
		t.Fatalf("reserve: %v %v", r, err)
	}
	req2 := req
	req2.Record.Token = 8
	if r, err := s.Reserve(ctx, req2); err != nil || r.Acquired {
		t.Fatalf("second reserve: %v %v", r, err)
	}
	if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: "s", Token: 8},
		State: store.Succeeded, TTL: time.Hour}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("complete with another token: %v", err)
	}
	inner.Close()
	if _, err := s.Get(ctx, "s", req.Record.KeyHash); err == nil {
		t.Fatal("get on a closed store succeeded")
	}
	parent.End()

	want := []struct {
		name, attr, value string
		failed            bool
	}{
		{"idem.store get", "idem.store.result", "not_found", false},
		{"idem.store reserve", "idem.store.acquired", "true", false},
		{"idem.store reserve", "idem.store.existing_state", "in_progress", false},
		{"idem.store complete", "idem.store.result", "lease_lost", false},
		{"idem.store get", "", "", true},
	}
	ended := rec.Ended()
	if len(ended) != len(want)+1 {
		t.Fatalf("%d spans, want %d", len(ended), len(want)+1)
	}
	for i, w := range want {
		sp := ended[i]
		if sp.Name() != w.name || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q under %s, want %q under the call", i, sp.Name(), sp.Parent().SpanID(), w.name)
		}
		if (sp.Status().Code == codes.Error) != w.failed {
			t.Errorf("span %d %q: status %v", i, sp.Name(), sp.Status())
		}
		if w.attr == "" {
			continue
		}
		got := ""
		for _, kv := range sp.Attributes() {
			if string(kv.Key) == w.attr {
				got = kv.Value.String()
			}
		}
		if got != w.value {
			t.Errorf("span %d %q: %s = %q, want %q", i, sp.Name(), w.attr, got, w.value)
		}
	}
}
