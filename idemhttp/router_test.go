package idemhttp_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// mounted builds a net/http ServeMux that serves /api/ through mount,
// given the middleware with routes written as the mounted handler sees
// them ("POST /orders"), and counts the handler's runs.
type mounted struct {
	srv    *httptest.Server
	mu     sync.Mutex
	runs   int
	events []idemhttp.Event
	logs   *records
}

func newMounted(t *testing.T, opts idemhttp.Options, mount func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler) *mounted {
	t.Helper()
	m := &mounted{logs: newRecords()}
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	t.Cleanup(func() { eng.Close() })
	opts.Tenant = idemhttp.TenantHeader("X-User-ID")
	opts.Routes = []idemhttp.Route{{Pattern: "POST /orders", Key: idemhttp.KeyRequired}}
	opts.Logger = slog.New(m.logs.h)
	opts.Observe = func(_ *http.Request, e idemhttp.Event) { m.mu.Lock(); m.events = append(m.events, e); m.mu.Unlock() }
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.runs++
		m.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	mux := http.NewServeMux()
	mux.Handle("/api/", mount(idemhttp.Middleware(eng, opts), h))
	m.srv = httptest.NewServer(mux)
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mounted) post(t *testing.T, path, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "POST", m.srv.URL+path, strings.NewReader(`{}`))
	req.Header.Set("X-User-ID", "alice")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := m.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// TestMountedUnderPrefix: under a router prefix, a route written as the
// mounted handler sees it protects its requests, with the prefix
// stripped by the router (http.StripPrefix) or by the middleware
// (Options.RoutePath): the key runs once, the retry is replayed, and a
// request without a key gets 400 on a KeyRequired route.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		opts  idemhttp.Options
		mount func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler
	}{
		"http.StripPrefix": {mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
			return http.StripPrefix("/api", mw(h))
		}},
		"RoutePath": {opts: idemhttp.Options{RoutePath: idemhttp.StripPrefix("/api")}, mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
			return mw(h)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := newMounted(t, c.opts, c.mount)
			for i, want := range []string{"false", "true"} {
				if res := m.post(t, "/api/orders", "k-1"); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != want {
					t.Fatalf("call %d: %d %v", i+1, res.StatusCode, res.Header)
				}
			}
			if res := m.post(t, "/api/orders", ""); res.StatusCode != http.StatusBadRequest {
				t.Fatalf("no key on a KeyRequired route: %d", res.StatusCode)
			}
			if m.runs != 1 {
				t.Fatalf("the handler ran %d times, want 1", m.runs)
			}
		})
	}
}

// TestUnroutedKeyedRequestIsNotSilent: mounted under a prefix it was not
// told of, the middleware covers none of its routes' requests; each keyed
// one is reported (OutcomeUnrouted) and the first of its path logged, so
// that the unprotected route shows.
func TestUnroutedKeyedRequestIsNotSilent(t *testing.T) {
	t.Parallel()
	m := newMounted(t, idemhttp.Options{}, func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler { return mw(h) })
	for range 3 {
		m.post(t, "/api/orders", "k-1")
	}
	m.post(t, "/api/orders", "") // no key: a plain pass-through
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs != 4 {
		t.Fatalf("the handler ran %d times", m.runs)
	}
	unrouted := 0
	for _, e := range m.events {
		if e.Outcome == idemhttp.OutcomeUnrouted {
			unrouted++
		}
	}
	if unrouted != 3 {
		t.Fatalf("%d unrouted events, want 3: %+v", unrouted, m.events)
	}
	m.logs.mu.Lock()
	logs := m.logs.buf.String()
	m.logs.mu.Unlock()
	if n := strings.Count(logs, "matches no route"); n != 1 || !strings.Contains(logs, `"path":"/api/orders"`) {
		t.Fatalf("%d log lines, want 1 naming the path:\n%s", n, logs)
	}
}
