package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// server is a test API behind the middleware, over real TCP.
type server struct {
	t      *testing.T
	url    string
	clock  *testkit.Clock
	store  *memory.Store
	mu     sync.Mutex
	counts map[string]int // executions per "METHOD path key"
}

func (s *server) count(method, path, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[method+" "+path+" "+key]
}

func (s *server) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// counting wraps a handler so that every execution is counted per key.
func (s *server) counting(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.counts[r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key")]++
		s.mu.Unlock()
		h(w, r)
	}
}

// newServer starts the API behind the middleware. With the default tenant,
// keyed requests without credentials share the anonymous scope (most tests
// are not about callers); newStrictServer keeps the default's 401.
func newServer(t *testing.T, opts idemhttp.Options, routes func(s *server, mux *http.ServeMux)) *server {
	t.Helper()
	if opts.Tenant == nil {
		opts.SharedAnonymousScope = true
	}
	return newStrictServer(t, opts, routes)
}

func newStrictServer(t *testing.T, opts idemhttp.Options, routes func(s *server, mux *http.ServeMux)) *server {
	t.Helper()
	clock := testkit.NewClock()
	s := &server{t: t, clock: clock, store: memory.New(memory.WithClock(clock.Now)), counts: map[string]int{}}
	eng := idem.New(s.store, idem.Policy{CleanupInterval: -1}, idem.WithClock(s.clock.Now))
	t.Cleanup(func() { eng.Close() })
	mux := http.NewServeMux()
	routes(s, mux)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	mw, err := idemhttp.New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mw(mux))
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// do sends a request; headers are name, value pairs (a name may repeat).
func (s *server) do(method, path, body string, headers ...string) *response {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// problem checks that r is an RFC 9457 problem with the status and kind.
func problem(t *testing.T, r *response, status int, kind idemhttp.Kind) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	p := r.json(t)
	if p["status"] != float64(status) || p["title"] == "" || !strings.HasSuffix(p["type"].(string), "#"+string(kind)) {
		t.Fatalf("problem %v, want kind %s", p, kind)
	}
	if kind.IsConflict() && p["conflict_type"] != string(kind) {
		t.Fatalf("conflict_type %v, want %s", p["conflict_type"], kind)
	}
	return p
}

func sameResponse(t *testing.T, a, b *response) {
	t.Helper()
	if a.Status != b.Status || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("responses differ:\n %d %s\n %d %s", a.Status, a.Body, b.Status, b.Body)
	}
}

var (
	quiet    = slog.New(slog.DiscardHandler)
	quietOpt = idem.WithLogger(quiet)
)

func newTestServer(t *testing.T, h http.Handler) string {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func storeHash(scope, key string) string { return store.HashKey(scope, key) }
