package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

type bundle struct {
	upstream *httptest.Server
	gateway  *httptest.Server
	store    store.Store
	calls    atomic.Int32
	seen     chan *http.Request
}

func setup(t *testing.T, mw idemhttp.Options, upstream http.HandlerFunc) *bundle {
	t.Helper()
	b := &bundle{store: memory.New(), seen: make(chan *http.Request, 16)}
	b.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		select {
		case b.seen <- r.Clone(context.Background()):
		default:
		}
		upstream(w, r)
	}))
	t.Cleanup(b.upstream.Close)
	u, _ := url.Parse(b.upstream.URL)
	b.gateway = httptest.NewServer(mustProxy(t, Options{Upstream: u, Engine: idem.New(b.store, idem.Policy{}), Middleware: mw}))
	t.Cleanup(b.gateway.Close)
	return b
}

// quiet keeps the expected warnings out of the test output.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// mustProxy makes the proxy; with the default tenant, keyed requests
// without credentials share the anonymous scope (most tests are not about
// callers; tenant_test.go's are).
func mustProxy(t *testing.T, o Options) *Proxy {
	t.Helper()
	o.Logger = quiet
	if o.Middleware.Tenant == nil && !o.Middleware.SharedAnonymousScope {
		o.Middleware.SharedAnonymousScope = true
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func send(t *testing.T, url, key string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"amount":1}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func created(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(201)
	io.WriteString(w, `{"ok":true}`)
}

func TestForwarding(t *testing.T) {
	t.Parallel()
	b := setup(t, idemhttp.Options{}, created)
	res := send(t, b.gateway.URL+"/charges?x=1", `"k-1"`, "X-Forwarded-For", "6.6.6.6")
	if res.StatusCode != 201 {
		t.Fatalf("status %d", res.StatusCode)
	}
	up := <-b.seen
	if got := up.Header.Get("Idempotency-Key"); got != `"k-1"` {
		t.Errorf("upstream Idempotency-Key = %q", got)
	}
	id := up.Header.Get("X-Request-Id")
	if len(id) != 32 || res.Header.Get("X-Request-Id") != id {
		t.Errorf("request id upstream %q, response %q", id, res.Header.Values("X-Request-Id"))
	}
	if got := up.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q (inbound values must not be trusted)", got)
	}
	if up.Header.Get("X-Forwarded-Host") == "" || up.Header.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("X-Forwarded-* = %v", up.Header)
	}
	if up.URL.RequestURI() != "/charges?x=1" {
		t.Errorf("upstream target = %s", up.URL.RequestURI())
	}

	// Keyless, safe and client-identified requests get or keep an ID.
	for _, c := range []struct {
		method, clientID string
	}{{"GET", ""}, {"POST", ""}, {"POST", "client-id-1"}, {"POST", "bad id with spaces"}} {
		req, _ := http.NewRequest(c.method, b.gateway.URL+"/x", nil)
		if c.clientID != "" {
			req.Header.Set("X-Request-Id", c.clientID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		up := <-b.seen
		got := up.Header.Get("X-Request-Id")
		switch {
		case c.clientID == "client-id-1" && got != c.clientID:
			t.Errorf("client ID replaced: %q", got)
		case c.clientID != "client-id-1" && len(got) != 32:
			t.Errorf("%s %q: upstream got ID %q", c.method, c.clientID, got)
		}
		if vs := res.Header.Values("X-Request-Id"); len(vs) != 1 || vs[0] != got {
			t.Errorf("response IDs %q, upstream %q", vs, got)
		}
	}
}

func TestEchoedRequestIDOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, idemhttp.Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		created(w, r)
	})
	res := send(t, b.gateway.URL+"/c", "k")
	if vs := res.Header.Values("X-Request-Id"); len(vs) != 1 {
		t.Errorf("X-Request-Id = %q, want one", vs)
	}
}

func problem(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var p map[string]any
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnreachableReleases: nothing was sent, so even the stripe profile,
// which caches every status, must let the retry run.
func TestUnreachableReleases(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	u, _ := url.Parse("http://" + addr)
	s := memory.New()
	var kinds []string
	gw := httptest.NewServer(mustProxy(t, Options{
		Upstream: u, Engine: idem.New(s, idem.Policy{}),
		Middleware:      idemhttp.Options{Profile: idemhttp.Stripe()},
		OnUpstreamError: func(k string) { kinds = append(kinds, k) },
	}))
	defer gw.Close()
	res := send(t, gw.URL+"/c", "k1")
	if res.StatusCode != 502 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if p := problem(t, res); p["idempotency_key"] != "k1" || p["status"] != 502.0 {
		t.Errorf("problem = %v", p)
	}
	if res.Header.Get("Idempotent-Replayed") == "true" || res.Header.Get("X-Request-Id") == "" {
		t.Errorf("headers = %v", res.Header)
	}
	if _, err := s.Get(context.Background(), "|POST /c", store.HashKey("|POST /c", "k1")); err == nil {
		t.Error("a record was kept for a request that never reached the upstream")
	}
	if len(kinds) != 1 || kinds[0] != "unreachable" {
		t.Errorf("OnUpstreamError got %v", kinds)
	}
	// Keyless requests get the same answer.
	if res := send(t, gw.URL+"/c", ""); res.StatusCode != 502 {
		t.Errorf("keyless: %d", res.StatusCode)
	}
}

func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := &bundle{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		<-release
	}))
	defer up.Close()
	defer close(release)
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(mustProxy(t, Options{Upstream: u, Engine: idem.New(memory.New(), idem.Policy{}), Transport: NewTransport(100 * time.Millisecond)}))
	defer gw.Close()
	res := send(t, gw.URL+"/c", "k1")
	if res.StatusCode != 504 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if p := problem(t, res); p["title"] != "Upstream timed out" {
		t.Errorf("problem = %v", p)
	}
}

// TestClientHangUp: the upstream call of a keyed request outlives its
// client, and the retry replays its outcome instead of running it again.
func TestClientHangUp(t *testing.T) {
	t.Parallel()
	b := setup(t, idemhttp.Options{}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
			created(w, r)
		case <-r.Context().Done():
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", b.gateway.URL+"/c", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "hang")
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("client did not time out")
	}
	deadline := time.Now().Add(30 * time.Second) // a generous bound: the call takes 300 ms
	for {
		res := send(t, b.gateway.URL+"/c", "hang")
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode == 201 {
			if res.Header.Get("Idempotent-Replayed") != "true" || string(body) != `{"ok":true}` {
				t.Errorf("retry: %v %s", res.Header, body)
			}
			break
		}
		if res.StatusCode != 409 || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s", res.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("upstream ran %d times", n)
	}
}
