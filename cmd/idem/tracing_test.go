package main

// The gateway's traces, end to end: `idem serve` configured by OTEL_*
// variables exports to a real Jaeger (built by scripts/jaeger.sh), in front
// of an upstream that is itself instrumented and exports to the same
// Jaeger under a service name of its own. One keyed request carries the
// caller's traceparent; Jaeger's query API must hold one trace with the
// gateway's spans and the upstream's.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// jaegerBin finds the Jaeger binary: $IDEM_JAEGER, the cache that
// scripts/jaeger.sh builds into, or PATH. Missing, the test is skipped,
// and fails under CI=true.
func jaegerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEM_JAEGER"); p != "" {
		return p
	}
	cache := os.Getenv("IDEM_CACHE_DIR")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "idem")
	}
	if p := filepath.Join(cache, "bin", "jaeger"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p
	}
	testenv.Unavailable(t, "Jaeger is not installed: run scripts/jaeger.sh install (or set IDEM_JAEGER)")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// jaeger is a Jaeger all-in-one with in-memory storage, its OTLP/HTTP
// receiver and query API on loopback ports of its own.
type jaeger struct {
	OTLP, Query string
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBin(t)
	for attempt := 1; ; attempt++ {
		otlp, query, grpc := freePort(t), freePort(t), freePort(t)
		cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, query, grpc, otlp)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		cmd := exec.Command(bin, "--config", "file:"+cfg)
		cmd.Stdout, cmd.Stderr = &out, &out
		testkit.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		j := &jaeger{OTLP: "http://" + otlp, Query: "http://" + query}
		deadline := time.Now().Add(60 * time.Second)
		for {
			res, err := http.Get(j.Query + "/api/services")
			if err == nil {
				res.Body.Close()
			}
			c, derr := net.DialTimeout("tcp", otlp, time.Second)
			if derr == nil {
				c.Close()
			}
			if err == nil && res.StatusCode == 200 && derr == nil {
				t.Cleanup(stop)
				return j
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				t.Fatalf("Jaeger did not answer within a minute:\n%s", out.String())
			}
			break // exited: a port taken between freePort and Jaeger's bind
		}
		if attempt == 3 {
			t.Fatalf("Jaeger exited:\n%s", out.String())
		}
	}
}

// jaegerConfig is Jaeger v2's all-in-one reduced to what the test uses:
// query API (HTTP, gRPC) and OTLP/HTTP, in memory. Format arguments: the
// query's HTTP and gRPC addresses, the OTLP receiver's.
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// jaegerTrace is a trace as Jaeger's query API returns it.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// span is one span of a trace, flattened for the assertions.
type span struct {
	id, name, service, parent string
	tags                      map[string]string
}

func (tr jaegerTrace) spans() []span {
	var out []span
	for _, s := range tr.Spans {
		sp := span{id: s.SpanID, name: s.OperationName, service: tr.Processes[s.ProcessID].ServiceName, tags: map[string]string{}}
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" {
				sp.parent = r.SpanID
			}
		}
		for _, tag := range s.Tags {
			sp.tags[tag.Key] = fmt.Sprint(tag.Value)
		}
		out = append(out, sp)
	}
	return out
}

// getTrace reads the trace traceID from Jaeger; nil when it has none yet.
func (j *jaeger) getTrace(t *testing.T, traceID string) *jaegerTrace {
	t.Helper()
	res, err := http.Get(j.Query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusNotFound {
		return nil
	}
	var doc struct {
		Data []jaegerTrace `json:"data"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &doc) != nil {
		t.Fatalf("GET /api/traces/%s: %d %s", traceID, res.StatusCode, b)
	}
	if len(doc.Data) == 0 {
		return nil
	}
	if len(doc.Data) != 1 || doc.Data[0].TraceID != traceID {
		t.Fatalf("GET /api/traces/%s returned %d traces", traceID, len(doc.Data))
	}
	return &doc.Data[0]
}

// waitTrace waits until Jaeger holds the trace with every span named in
// want ("service/operation"), and returns it.
func (j *jaeger) waitTrace(t *testing.T, traceID string, want ...string) *jaegerTrace {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tr := j.getTrace(t, traceID)
		if tr != nil {
			have := map[string]bool{}
			for _, s := range tr.spans() {
				have[s.service+"/"+s.name] = true
			}
			missing := 0
			for _, w := range want {
				if !have[w] {
					missing++
				}
			}
			if missing == 0 {
				return tr
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace %s lacks some of %q; it holds %v", traceID, want, have)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("Jaeger has no trace %s", traceID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tracedUpstream is an API instrumented with otelhttp, exporting its spans
// to Jaeger as service "idem-e2e-upstream".
func tracedUpstream(t *testing.T, j *jaeger) string {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(j.OTLP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "idem-e2e-upstream")))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_1","traceparent":%q}`, r.Header.Get("Traceparent"))
	})
	ts := httptest.NewServer(otelhttp.NewHandler(h, "charges",
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "upstream " + r.Method + " " + r.URL.Path })))
	t.Cleanup(func() {
		ts.Close()
		tp.Shutdown(context.Background())
	})
	return ts.URL
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestTracingJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	upstream := tracedUpstream(t, j)
	const service = "idem-e2e-gateway"
	// The batch span processor waits ten minutes between exports: only
	// the flush at graceful exit can bring the gateway's spans in time.
	env := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLP,
		"OTEL_SERVICE_NAME=" + service,
		"OTEL_BSP_SCHEDULE_DELAY=600000",
	}
	g := startGatewayEnv(t, env, upstream, t.TempDir(), "routes:\n  - match: \"POST /charges\"\n")

	const key = "raw-order-key-7731"
	traceID, callerSpan := randomHex(t, 16), randomHex(t, 8)
	r := post(t, g.URL+"/charges", `{"amount":1000}`, "Idempotency-Key", key, "Traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	if r.Status != 201 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	// What reached the upstream: the caller's trace, another parent.
	var seen struct{ Traceparent string }
	if err := json.Unmarshal(r.Body, &seen); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(seen.Traceparent, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[2] == callerSpan {
		t.Fatalf("the upstream got traceparent %q; want trace %s under a span of the gateway's", seen.Traceparent, traceID)
	}
	replayTrace := randomHex(t, 16)
	if r := post(t, g.URL+"/charges", `{"amount":1000}`, "Idempotency-Key", key, "Traceparent", "00-"+replayTrace+"-"+randomHex(t, 8)+"-01"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v", r.Status, r.Header)
	}

	if tr := j.getTrace(t, traceID); tr != nil {
		for _, s := range tr.spans() {
			if s.service == service {
				t.Fatalf("the gateway's spans arrived before its exit flushed them (span %q): the test cannot tell the flush", s.name)
			}
		}
	}
	if err := g.stop(os.Interrupt, 30*time.Second); err != nil {
		t.Fatalf("graceful exit: %v", err)
	}

	tr := j.waitTrace(t, traceID,
		service+"/POST", service+"/idem POST /charges", service+"/idem.store reserve", service+"/idem.store complete",
		service+"/upstream POST", "idem-e2e-upstream/upstream POST /charges")
	byName := map[string]span{}
	defer func() {
		if t.Failed() {
			for _, s := range tr.spans() {
				t.Logf("span %s/%s id %s parent %s tags %v", s.service, s.name, s.id, s.parent, s.tags)
			}
		}
	}()
	for _, s := range tr.spans() {
		byName[s.service+"/"+s.name] = s
		for k, v := range s.tags {
			if strings.Contains(v, key) {
				t.Errorf("span %s/%s tag %s = %q holds the raw key", s.service, s.name, k, v)
			}
		}
	}
	server, call := byName[service+"/POST"], byName[service+"/idem POST /charges"]
	client, up := byName[service+"/upstream POST"], byName["idem-e2e-upstream/upstream POST /charges"]
	for _, c := range []struct {
		child, parent span
		parentID      string
	}{
		{server, span{name: "the caller's span"}, callerSpan},
		{call, server, server.id},
		{byName[service+"/idem.store reserve"], call, call.id},
		{byName[service+"/idem.store complete"], call, call.id},
		{client, call, call.id},
		{up, client, client.id},
	} {
		if c.child.parent != c.parentID {
			t.Errorf("span %s/%s has parent %s, want %s (%s)", c.child.service, c.child.name, c.child.parent, c.parentID, c.parent.name)
		}
	}
	if call.tags["idem.outcome"] != "executed" || call.tags["idem.waited"] != "false" || len(call.tags["idem.key_hash"]) != 32 ||
		call.tags["http.route"] != "POST /charges" {
		t.Errorf("the call span's tags: %v", call.tags)
	}
	if up.parent != parts[2] {
		t.Errorf("the upstream's span is under %s, the traceparent it got names %s", up.parent, parts[2])
	}

	// The retry's trace: a replay, and nothing of the upstream's.
	rt := j.waitTrace(t, replayTrace, service+"/idem POST /charges")
	for _, s := range rt.spans() {
		if s.name == "idem POST /charges" && s.tags["idem.outcome"] != "replayed" {
			t.Errorf("the retry's call span: %v", s.tags)
		}
		if strings.HasPrefix(s.name, "upstream") {
			t.Errorf("the retry reached the upstream: span %s/%s", s.service, s.name)
		}
	}
}

// A tracing setting the gateway cannot use stops it at start, naming the
// variable, before it listens.
func TestTracingConfigRefused(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"OTEL_TRACES_EXPORTER=zipkin"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=2"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, idemBin, "serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
			"--admin-listen", "off", "--store", "memory:")
		cmd.Env = append(childEnv(), env...)
		testkit.DieWithParent(cmd)
		out, err := cmd.CombinedOutput()
		cancel()
		name, _, _ := strings.Cut(env[len(env)-1], "=")
		if err == nil || !strings.Contains(string(out), name) || strings.Contains(string(out), "listening") {
			t.Errorf("%q: exit %v, output:\n%s\nwant a refusal naming %s before listening", env, err, out, name)
		}
	}
}
