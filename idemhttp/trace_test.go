package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// tracedServer is an API behind the middleware over TCP, its spans
// recorded. Its handlers start a span of their own ("upstream"), as an
// instrumented client of the upstream would, to check the parent chain.
type tracedServer struct {
	*server
	rec     *tracetest.SpanRecorder
	release chan struct{}   // ends one POST /slow or POST /wait
	stop    chan struct{}   // ends them all: closed when the test ends
	started chan struct{}   // POST /slow or POST /wait began
	held    *inProgressSeen // the store under the engine
}

// inProgressSeen signals when a reservation of a key ending in "-wait"
// found it held for the second time: a caller that may wait (Policy.Wait)
// subscribed, read the record again and found it still held, so it waits
// now.
type inProgressSeen struct {
	store.Store
	n       atomic.Int32
	waiting chan struct{}
}

func (s *inProgressSeen) Unwrap() store.Store { return s.Store }

func (s *inProgressSeen) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	res, err := s.Store.Reserve(ctx, req)
	if err == nil && strings.HasSuffix(req.Record.Key, "-wait") && !res.Acquired && res.Existing.State == store.InProgress && s.n.Add(1) == 2 {
		close(s.waiting)
	}
	return res, err
}

const traceSecret = "raw-tenant-4711" // the tenant, which must never reach a span

func newTracedServer(t *testing.T) *tracedServer {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	s := &tracedServer{
		server:  &server{t: t, counts: map[string]int{}},
		rec:     rec,
		release: make(chan struct{}), stop: make(chan struct{}), started: make(chan struct{}, 2),
		held: &inProgressSeen{Store: memory.New(), waiting: make(chan struct{})},
	}
	eng := idem.New(s.held, idem.Policy{CleanupInterval: -1}, quietOpt)
	t.Cleanup(func() { eng.Close() })
	upstream := tp.Tracer("test-upstream")
	mux := http.NewServeMux()
	chargesAPI(s.server, mux)
	slow := func(w http.ResponseWriter, r *http.Request) {
		_, sp := upstream.Start(r.Context(), "upstream")
		defer sp.End()
		s.started <- struct{}{}
		select {
		case <-s.release:
		case <-s.stop:
		}
		w.WriteHeader(http.StatusCreated)
	}
	mux.HandleFunc("POST /slow", slow)
	mux.HandleFunc("POST /wait", slow)
	traced := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/charges" {
			_, sp := upstream.Start(r.Context(), "upstream")
			defer sp.End()
		}
		mux.ServeHTTP(w, r)
	})
	mw, err := idemhttp.New(eng, idemhttp.Options{
		Logger: quiet, TracerProvider: tp, Propagators: propagation.TraceContext{},
		Tenant: idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{
			{Pattern: "POST /charges"}, {Pattern: "POST /slow"},
			{Pattern: "POST /wait", Policy: &idem.Policy{Wait: time.Minute, CleanupInterval: -1}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.url = newTestServer(t, mw(traced))
	t.Cleanup(func() { close(s.stop) }) // before the server closes: a failed test leaves no handler waiting
	return s
}

// spans returns the ended spans of the trace, by name.
func (s *tracedServer) spans(traceID trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range s.rec.Ended() {
		if sp.SpanContext().TraceID() == traceID {
			out[sp.Name()] = append(out[sp.Name()], sp)
		}
	}
	return out
}

// callSpan returns the one middleware span of the trace, once it ended:
// the middleware ends it after the response is written, which the client
// may read first.
func (s *tracedServer) callSpan(t *testing.T, traceID trace.TraceID, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l := s.spans(traceID)[name]; len(l) == 1 {
			return l[0]
		} else if len(l) > 1 {
			t.Fatalf("%d spans %q in one call", len(l), name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q in trace %s; spans: %v", name, traceID, s.spans(traceID))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var traceSeq atomic.Uint64

// newTraceparent returns a caller's trace context: a W3C traceparent
// header value and its trace and span IDs.
func newTraceparent() (string, trace.TraceID, trace.SpanID) {
	n := traceSeq.Add(1)
	var tid trace.TraceID
	var sid trace.SpanID
	tid[0], tid[15], sid[0], sid[7] = 0xab, byte(n), 0xcd, byte(n)
	return fmt.Sprintf("00-%s-%s-01", tid, sid), tid, sid
}

func attrs(sp sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range sp.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// noRawIdentity checks every attribute of every span recorded so far: the
// key and the tenant appear nowhere, not even inside another value.
func (s *tracedServer) noRawIdentity(t *testing.T, key string) {
	t.Helper()
	for _, sp := range s.rec.Ended() {
		for _, kv := range sp.Attributes() {
			v := kv.Value.String()
			if strings.Contains(v, key) || strings.Contains(v, traceSecret) {
				t.Fatalf("span %q attribute %s = %q holds the raw key or tenant", sp.Name(), kv.Key, v)
			}
		}
	}
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestTraceSpans(t *testing.T) {
	t.Parallel()
	s := newTracedServer(t)
	const key = "order-2024-raw-key"

	send := func(path, body, key string) (*response, trace.TraceID, trace.SpanID) {
		tp, tid, sid := newTraceparent()
		r := s.do("POST", path, body, "Idempotency-Key", key, "X-User-ID", traceSecret, "Traceparent", tp)
		return r, tid, sid
	}
	check := func(t *testing.T, sp sdktrace.ReadOnlySpan, parent trace.SpanID, outcome, waited string) map[string]string {
		t.Helper()
		if sp.Parent().SpanID() != parent || !sp.Parent().IsRemote() {
			t.Fatalf("span %q has parent %s (remote %v), want the caller's %s", sp.Name(), sp.Parent().SpanID(), sp.Parent().IsRemote(), parent)
		}
		a := attrs(sp)
		if a["idem.outcome"] != outcome || a["idem.waited"] != waited {
			t.Fatalf("outcome %q waited %q, want %q %q; attributes %v", a["idem.outcome"], a["idem.waited"], outcome, waited, a)
		}
		if !hexHash.MatchString(a["idem.key_hash"]) || !hexHash.MatchString(a["idem.scope_hash"]) || a["idem.key_hash"] == a["idem.scope_hash"] {
			t.Fatalf("scope and key hashes: %v", a)
		}
		return a
	}

	var keyHash string
	t.Run("executed", func(t *testing.T) {
		r, tid, caller := send("/charges", `{"amount":1}`, key)
		if r.Status != 201 {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
		sp := s.callSpan(t, tid, "idem POST /charges")
		a := check(t, sp, caller, "executed", "false")
		if a["http.route"] != "POST /charges" || a["http.response.status_code"] != "201" || a["http.request.method"] != "POST" {
			t.Fatalf("attributes %v", a)
		}
		keyHash = a["idem.key_hash"]
		up := s.spans(tid)["upstream"]
		if len(up) != 1 || up[0].Parent().SpanID() != sp.SpanContext().SpanID() {
			t.Fatalf("the handler's span is not the call span's child: %v", up)
		}
	})

	t.Run("replayed", func(t *testing.T) {
		r, tid, caller := send("/charges", `{"amount":1}`, key)
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("not a replay: %d %v", r.Status, r.Header)
		}
		a := check(t, s.callSpan(t, tid, "idem POST /charges"), caller, "replayed", "false")
		if a["idem.key_hash"] != keyHash {
			t.Fatalf("the key's hash changed between calls: %s, then %s", keyHash, a["idem.key_hash"])
		}
		if n := len(s.spans(tid)["upstream"]); n != 0 {
			t.Fatalf("a replay ran the handler (%d spans)", n)
		}
	})

	t.Run("payload_mismatch", func(t *testing.T) {
		r, tid, caller := send("/charges", `{"amount":2}`, key)
		problem(t, r, 422, idemhttp.KindPayloadMismatch)
		check(t, s.callSpan(t, tid, "idem POST /charges"), caller, "payload_mismatch", "false")
	})

	t.Run("in_progress", func(t *testing.T) {
		done := make(chan *response, 1)
		go func() { r, _, _ := send("/slow", "", key+"-slow"); done <- r }()
		<-s.started
		r, tid, caller := send("/slow", "", key+"-slow")
		problem(t, r, 409, idemhttp.KindInProgress)
		check(t, s.callSpan(t, tid, "idem POST /slow"), caller, "in_progress", "false")
		s.release <- struct{}{}
		if first := <-done; first.Status != 201 {
			t.Fatalf("first: %d", first.Status)
		}
	})

	t.Run("waited", func(t *testing.T) {
		done := make(chan *response, 1)
		go func() { r, _, _ := send("/wait", "", key+"-wait"); done <- r }()
		<-s.started
		type sent struct {
			r      *response
			tid    trace.TraceID
			caller trace.SpanID
		}
		second := make(chan sent, 1)
		go func() { r, tid, caller := send("/wait", "", key+"-wait"); second <- sent{r, tid, caller} }()
		<-s.held.waiting // the second call waits for the first
		s.release <- struct{}{}
		<-done
		w := <-second
		if w.r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the waiting call got %d %v", w.r.Status, w.r.Header)
		}
		check(t, s.callSpan(t, w.tid, "idem POST /wait"), w.caller, "replayed", "true")
	})

	s.noRawIdentity(t, key)
}

// A request without a key is not a keyed call: no span of the middleware's.
func TestTraceKeylessRequestHasNoSpan(t *testing.T) {
	t.Parallel()
	s := newTracedServer(t)
	tp, tid, _ := newTraceparent()
	if r := s.do("POST", "/charges", `{}`, "X-User-ID", traceSecret, "Traceparent", tp); r.Status != 201 {
		t.Fatalf("status %d", r.Status)
	}
	if l := s.spans(tid)["idem POST /charges"]; len(l) != 0 {
		t.Fatalf("a keyless request got a span: %v", l)
	}
}
