package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// tracedGateway is a proxy over TCP in front of an upstream that reports
// the traceparent each request brought; rec holds the gateway's spans, or
// is nil when the proxy is not given a provider.
func tracedGateway(t *testing.T, traced bool) (gw string, rec *tracetest.SpanRecorder, seen chan string) {
	t.Helper()
	seen = make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	eng := idem.New(memory.New(), idem.Policy{})
	t.Cleanup(func() { eng.Close() })
	o := Options{Upstream: u, Engine: eng, Middleware: idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "POST /charges"}}}}
	if traced {
		rec = tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		o.TracerProvider = tp
	}
	g := httptest.NewServer(mustProxy(t, o))
	t.Cleanup(g.Close)
	return g.URL, rec, seen
}

func sendTraced(t *testing.T, method, url, key string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
	req.Header.Set("Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

// spanByName returns the ended span named name, failing when there is not
// exactly one.
func spanByName(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %q", len(found), name)
	}
	return found[0]
}

// Traced, the upstream call is a child span of the keyed call's, and the
// upstream gets its context; a request the middleware does not cover
// stays in the caller's trace too.
func TestTraceContextToUpstream(t *testing.T) {
	t.Parallel()
	gw, rec, seen := tracedGateway(t, true)

	sendTraced(t, "POST", gw+"/charges", "k-1")
	tp := <-seen
	call := spanByName(t, rec, "idem POST /charges")
	client := spanByName(t, rec, "upstream POST")
	server := spanByName(t, rec, "POST")
	if server.Parent().SpanID().String() != callerSpan || server.SpanContext().TraceID().String() != callerTrace {
		t.Fatalf("server span parent %s in trace %s", server.Parent().SpanID(), server.SpanContext().TraceID())
	}
	if call.Parent().SpanID() != server.SpanContext().SpanID() || client.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("parents: call under %s (server %s), upstream call under %s (call %s)",
			call.Parent().SpanID(), server.SpanContext().SpanID(), client.Parent().SpanID(), call.SpanContext().SpanID())
	}
	if want := "00-" + callerTrace + "-" + client.SpanContext().SpanID().String() + "-01"; tp != want {
		t.Fatalf("upstream got traceparent %q, want %q", tp, want)
	}

	sendTraced(t, "GET", gw+"/charges", "")
	if tp := <-seen; !strings.HasPrefix(tp, "00-"+callerTrace+"-") || strings.Contains(tp, callerSpan) {
		t.Fatalf("a pass-through request's upstream got traceparent %q, want the caller's trace under a gateway span", tp)
	}
}

// Untraced, the gateway makes no span and passes the caller's traceparent
// on as it came.
func TestUntracedPassesTraceparentOn(t *testing.T) {
	t.Parallel()
	gw, _, seen := tracedGateway(t, false)
	sendTraced(t, "POST", gw+"/charges", "k-1")
	if tp := <-seen; tp != "00-"+callerTrace+"-"+callerSpan+"-01" {
		t.Fatalf("upstream got traceparent %q", tp)
	}
}
