package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// adminServer is an admin listener over a memory store and an engine that
// goes through a Tracker, as the gateway wires it.
type adminServer struct {
	*httptest.Server
	store    *memory.Store
	tracked  store.Store // store as the engine sees it, through the tracker
	eng      *idem.Engine
	draining atomic.Bool
	upErr    atomic.Pointer[error]
}

func newAdminServer(t *testing.T, token string, reg prometheus.Gatherer) *adminServer {
	t.Helper()
	a := &adminServer{store: memory.New()}
	tr := &Tracker{}
	a.tracked = tr.Wrap(a.store)
	a.eng = idem.New(a.tracked, idem.Policy{CleanupInterval: -1}, idem.WithLogger(quiet))
	t.Cleanup(func() { a.eng.Close(); a.store.Close() })
	a.Server = httptest.NewServer(Admin(AdminOptions{
		Store: a.store, Token: token, Draining: &a.draining, Logger: quiet, Gatherer: reg, Tracker: tr,
		Cleaner: a.eng, CountExpired: a.store.CountExpired, Releaser: a.eng,
		Upstream: func(context.Context) error {
			if p := a.upErr.Load(); p != nil {
				return *p
			}
			return nil
		},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") }),
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *adminServer) call(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, a.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, b := testkit.Send(t, req)
	return res.StatusCode, string(b)
}

// TestAdminProbes: /healthz is liveness only; /readyz turns 503 while
// draining, when the store fails, and when the upstream is unreachable.
func TestAdminProbes(t *testing.T) {
	t.Parallel()
	a := newAdminServer(t, "tok", nil)
	if code, body := a.call(t, "GET", "/healthz", ""); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("/healthz = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"upstream": "ok"`) {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/metrics", ""); code != 200 || body != "m 1\n" {
		t.Errorf("/metrics = %d %s", code, body)
	}
	down := errors.New("cannot connect to 127.0.0.1:1: connection refused")
	a.upErr.Store(&down)
	// The raw error only with the admin token: it names hosts and users.
	if code, body := a.call(t, "GET", "/readyz", ""); code != 503 || !strings.Contains(body, `"upstream": "upstream unavailable"`) || strings.Contains(body, "refused") {
		t.Errorf("/readyz with the upstream down, no token = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/readyz", "wrong-token"); code != 503 || strings.Contains(body, "refused") {
		t.Errorf("/readyz with the upstream down, a wrong token = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/readyz", "tok"); code != 503 || !strings.Contains(body, "upstream unavailable: cannot connect to 127.0.0.1:1: connection refused") {
		t.Errorf("/readyz with the upstream down, the admin token = %d %s", code, body)
	}
	if code, _ := a.call(t, "GET", "/healthz", ""); code != 200 {
		t.Errorf("/healthz with the upstream down = %d, want 200 (liveness)", code)
	}
	a.upErr.Store(nil)
	a.draining.Store(true)
	if code, body := a.call(t, "GET", "/readyz", ""); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining = %d %s", code, body)
	}
	if code, _ := a.call(t, "GET", "/healthz", ""); code != 200 {
		t.Errorf("/healthz while draining = %d, want 200", code)
	}
	a.draining.Store(false)
	a.store.Close()
	if code, body := a.call(t, "GET", "/readyz", ""); code != 503 || !strings.Contains(body, `"store": "store unavailable"`) || strings.Contains(body, "closed") {
		t.Errorf("/readyz with a closed store, no token = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/readyz", "tok"); code != 503 || !strings.Contains(body, "store unavailable: ") || !strings.Contains(body, "closed") {
		t.Errorf("/readyz with a closed store, the admin token = %d %s", code, body)
	}
}

// TestAdminToken: everything but the probes and /metrics needs the token,
// and is off without one; pprof too.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	a := newAdminServer(t, "tok", nil)
	for _, c := range []struct {
		method, path, token string
		code                int
		want                string
	}{
		{"GET", "/api/keys?scope=t1&key=k1", "", 401, "token"},
		{"GET", "/keys?scope=t1&key=k1", "wrong", 401, "token"},
		{"GET", "/api/stats", "", 401, "token"},
		{"POST", "/api/cleanup", "", 401, "token"},
		{"POST", "/api/keys/release?key=k", "", 401, "token"},
		{"GET", "/debug/pprof/", "", 401, "token"},
		{"GET", "/debug/pprof/", "tok", 200, "goroutine"},
		{"GET", "/debug/pprof/cmdline", "tok", 404, ""},
		{"GET", "/", "", 200, "idem admin"}, // the page asks for the token
	} {
		if code, body := a.call(t, c.method, c.path, c.token); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s with %q = %d %.200s", c.method, c.path, c.token, code, body)
		}
	}
	off := newAdminServer(t, "", nil)
	for _, p := range []string{"/api/keys?key=k", "/debug/pprof/", "/api/stats", "/"} {
		if code, body := off.call(t, "GET", p, "anything"); code != 404 || !strings.Contains(body, "set admin_token") {
			t.Errorf("%s without a token configured = %d %s", p, code, body)
		}
	}
	if code, _ := off.call(t, "GET", "/readyz", ""); code != 200 {
		t.Errorf("/readyz without a token = %d", code)
	}
}

// TestAdminKeys: inspect, and release of a key whose holder's lease is
// over (the fallback without the engine's release), refused for a key
// whose outcome is known.
func TestAdminKeys(t *testing.T) {
	t.Parallel()
	a := newAdminServer(t, "tok", nil)
	ctx := context.Background()
	if _, err := a.eng.Do(ctx, idem.Call{Scope: "t1", Key: "k1"}, func(context.Context) ([]byte, error) {
		return []byte("hello"), nil
	}); err != nil {
		t.Fatal(err)
	}
	// A holder that died: in progress, lease over.
	stuck := store.Record{KeyHash: store.HashKey("t1", "stuck"), Scope: "t1", Key: "stuck", State: store.InProgress,
		Token: 7, RequestID: "req-stuck"}
	if r, err := a.store.Reserve(ctx, store.ReserveRequest{Record: stuck, Lease: time.Millisecond, TTL: time.Hour}); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	time.Sleep(5 * time.Millisecond) // its lease is over
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/api/keys?scope=t1", 400, "key is required"},
		{"GET", "/api/keys?scope=t2&key=k1", 404, "no live record"},
		{"GET", "/keys?scope=t1&key=k1", 200, `"value_text": "hello"`},
		{"GET", "/api/keys?scope=t1&key=k1", 200, `"outcome_unknown": false`},
		{"GET", "/api/keys?scope=t1&key=stuck", 200, `"outcome_unknown": true`},
		{"POST", "/api/keys/release?scope=t1&key=k1", 409, "outcome is known"},
		{"POST", "/api/keys/release?scope=t1&key=nope", 404, "nothing to release"},
		{"POST", "/api/keys/release?scope=t1&key=stuck", 200, `"released": true`},
		{"GET", "/api/keys?scope=t1&key=stuck", 404, "no live record"},
		{"POST", "/api/keys/release?scope=t1&key=stuck", 404, "nothing to release"},
	} {
		if code, body := a.call(t, c.method, c.path, "tok"); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s = %d %s", c.method, c.path, code, body)
		}
	}
	// A key failed with an unknown outcome: listed as such, released by
	// the engine, then runs again.
	if _, err := a.eng.Do(ctx, idem.Call{Scope: "t1", Key: "lost"}, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("timeout after sending: %w", idem.ErrOutcomeUnknown)
	}); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/api/keys?scope=t1&key=lost", 200, `"outcome_unknown": true`},
		{"POST", "/api/keys/release?scope=t1&key=lost", 200, `"released": true`},
		{"GET", "/api/keys?scope=t1&key=lost", 404, "no live record"},
	} {
		if code, body := a.call(t, c.method, c.path, "tok"); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s = %d %s", c.method, c.path, code, body)
		}
	}
	// The released key runs again.
	ran := false
	if _, err := a.eng.Do(ctx, idem.Call{Scope: "t1", Key: "stuck"}, func(context.Context) ([]byte, error) {
		ran = true
		return nil, nil
	}); err != nil || !ran {
		t.Errorf("after release: ran %v, %v", ran, err)
	}
}

// TestAdminCleanup: progress as JSON lines, then the total; a dry run
// counts without removing.
func TestAdminCleanup(t *testing.T) {
	t.Parallel()
	a := newAdminServer(t, "tok", nil)
	ctx := context.Background()
	// Three records that have expired.
	for i, k := range []string{"a", "b", "c"} {
		rec := store.Record{KeyHash: store.HashKey("", k), Key: k, State: store.InProgress, Token: uint64(i + 1)}
		if r, err := a.store.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Millisecond, TTL: time.Millisecond}); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	if code, body := a.call(t, "POST", "/api/cleanup?dry_run=true", "tok"); code != 200 || !strings.Contains(body, `"expired": 3`) {
		t.Errorf("dry run = %d %s", code, body)
	}
	if code, body := a.call(t, "POST", "/api/cleanup?batch=x", "tok"); code != 400 {
		t.Errorf("bad batch = %d %s", code, body)
	}
	code, body := a.call(t, "POST", "/api/cleanup?batch=2", "tok")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || len(lines) != 3 || lines[0] != `{"removed":2}` || lines[1] != `{"removed":3}` ||
		!strings.Contains(lines[2], `"done":true`) || !strings.Contains(lines[2], `"removed":3`) {
		t.Errorf("cleanup = %d %q", code, lines)
	}
}

// TestAdminStats: the page's numbers come from the registry, and the
// tracker lists held keys and failed ones whose outcome is unknown.
func TestAdminStats(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ex := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_executions_total"}, []string{"route", "code"})
	cf := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_conflicts_total"}, []string{"route", "conflict_type"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idem_store_operation_duration_seconds", Buckets: []float64{.001, .01}}, []string{"operation", "result"})
	reg.MustRegister(ex, cf, h)
	ex.WithLabelValues("/a", "2xx").Add(3)
	ex.WithLabelValues("/b", "5xx").Add(2)
	cf.WithLabelValues("/a", "in_progress").Add(4)
	h.WithLabelValues("get", "ok").Observe(.0005)
	h.WithLabelValues("reserve", "ok").Observe(.005)
	a := newAdminServer(t, "tok", reg)
	ctx := context.Background()

	held := make(chan struct{})
	release := make(chan struct{})
	go a.eng.Do(ctx, idem.Call{Scope: "s", Key: "slow"}, func(context.Context) ([]byte, error) {
		close(held)
		<-release
		return nil, nil
	})
	<-held
	// A call that started and whose outcome is unknown, and a plain
	// failure the policy keeps (known: not listed).
	_, _ = a.eng.Do(ctx, idem.Call{Scope: "s", Key: "broken"}, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("connection reset after the request was sent: %w", idem.ErrOutcomeUnknown)
	})
	_, _ = idem.New(a.tracked, idem.Policy{OnFailure: idem.OnFailureCache, CleanupInterval: -1}).Do(ctx,
		idem.Call{Scope: "s", Key: "declined"}, func(context.Context) ([]byte, error) { return nil, errors.New("card declined") })

	code, body := a.call(t, "GET", "/api/stats", "tok")
	close(release)
	var st Stats
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/api/stats = %d %s %v", code, body, err)
	}
	if st.Totals["executions"] != 5 || st.Totals["conflicts"] != 4 || st.Conflicts["in_progress"] != 4 {
		t.Errorf("totals %v conflicts %v", st.Totals, st.Conflicts)
	}
	if st.Store.Count != 2 || len(st.Store.Buckets) != 2 || st.Store.Buckets[0] != 1 || st.Store.Buckets[1] != 2 {
		t.Errorf("store histogram %+v", st.Store)
	}
	if len(st.InProgress) != 1 || st.InProgress[0].Key != "slow" || st.InProgress[0].Scope != "s" {
		t.Errorf("in progress %+v", st.InProgress)
	}
	if len(st.OutcomeUnknown) != 1 || st.OutcomeUnknown[0].Key != "broken" || st.OutcomeUnknown[0].State != "failed" {
		t.Errorf("outcome unknown %+v", st.OutcomeUnknown)
	}
}

func TestAdminWarning(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr, token string
		warn        bool
	}{
		{"127.0.0.1:9090", "", false},
		{"[::1]:9090", "", false},
		{"localhost:9090", "", false},
		{"0.0.0.0:9090", "", true},
		{":9090", "", true},
		{"10.0.0.5:9090", "", true},
		{"0.0.0.0:9090", "tok", false},
	} {
		if got := AdminWarning(c.addr, c.token) != ""; got != c.warn {
			t.Errorf("AdminWarning(%q, %q) = %v", c.addr, c.token, got)
		}
	}
}

// TestUpstreamBodyError: an upstream that hangs up in the middle of its
// body is logged once through the gateway's logger, with the key and the
// request ID, and nothing goes to the standard logger.
func TestUpstreamBodyError(t *testing.T) {
	t.Parallel()
	var std, logged strings.Builder
	var mu sync.Mutex
	log.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return std.Write(p)
	}))
	defer log.SetOutput(os.Stderr)
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(201)
		io.WriteString(w, `{"partial":`)
		w.(http.Flusher).Flush()
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	p, err := New(Options{Upstream: u, Engine: idem.New(memory.New(), idem.Policy{}), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(p)
	defer gw.Close()
	req, _ := http.NewRequest("POST", gw.URL+"/charges", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "cut-1")
	req.Header.Set("Authorization", "Bearer sk_alice")
	req.Header.Set("X-Request-Id", "req-cut-1")
	if res, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	mu.Lock()
	out, stdOut := logged.String(), std.String()
	mu.Unlock()
	if strings.Count(out, "response body failed") != 1 || strings.Contains(out, "=cut-1") || !strings.Contains(out, "request_id=req-cut-1") { // the request ID, never the raw key
		t.Errorf("gateway log:\n%s", out)
	}
	if stdOut != "" {
		t.Errorf("standard logger:\n%s", stdOut)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAdminScopeFromRoute: with AdminOptions.Scope, a key is found by the
// request's method and path instead of its scope.
func TestAdminScopeFromRoute(t *testing.T) {
	t.Parallel()
	st := memory.New()
	eng := idem.New(st, idem.Policy{CleanupInterval: -1}, idem.WithLogger(quiet))
	defer eng.Close()
	if _, err := eng.Do(context.Background(), idem.Call{Scope: "u1|POST /charges", Key: "k"}, func(context.Context) ([]byte, error) {
		return []byte("ok"), nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Admin(AdminOptions{Store: st, Token: "tok", Logger: quiet,
		Scope: func(method, target, tenant string) (string, bool) {
			if target != "/charges" {
				return "", false
			}
			return tenant + "|" + method + " " + target, true
		}}))
	defer srv.Close()
	a := &adminServer{Server: srv}
	if code, body := a.call(t, "GET", "/api/keys?path=/charges&tenant=u1&key=k", "tok"); code != 200 || !strings.Contains(body, `"scope": "u1|POST /charges"`) {
		t.Errorf("by path = %d %s", code, body)
	}
	if code, body := a.call(t, "GET", "/api/keys?path=/other&key=k", "tok"); code != 404 || !strings.Contains(body, "no route covers") {
		t.Errorf("uncovered path = %d %s", code, body)
	}
}

// unwritable is a store whose disk is full: reads work, writes do not.
type unwritable struct{ store.Store }

func (unwritable) Writable(context.Context) error { return store.ErrNoSpace }

// TestReadyzStoreNotWritable: a store that cannot write (an embedded store
// on a full disk) makes the gateway not ready, saying why, through the
// wrappers the gateway puts around it; liveness stays up.
func TestReadyzStoreNotWritable(t *testing.T) {
	t.Parallel()
	tr := &Tracker{}
	h := Admin(AdminOptions{Store: tr.Wrap(unwritable{memory.New()}), HealthTimeout: time.Second})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "not writable") {
		t.Fatalf("/readyz on a full store: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/healthz on a full store: %d", rec.Code)
	}
}

// The admin API names keys by the hashes logs and traces print them by,
// keyed by the gateway's Redactor: in a key's inspection and in the page's
// list of keys in progress.
func TestAdminPrintsKeyedHashes(t *testing.T) {
	t.Parallel()
	red := idem.Redactor{MAC: func(b []byte) string { return fmt.Sprintf("mac%x", sha256.Sum256(append([]byte("k:"), b...)))[:35] }}
	st := memory.New()
	tr := &Tracker{}
	eng := idem.New(tr.Wrap(st), idem.Policy{CleanupInterval: -1}, idem.WithLogger(quiet))
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(Admin(AdminOptions{Store: st, Token: "tok", Logger: quiet, Tracker: tr, Releaser: eng, Redactor: red}))
	t.Cleanup(srv.Close)
	a := &adminServer{Server: srv}

	release, running := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := eng.Do(context.Background(), idem.Call{Scope: "alice", Key: "k1"}, func(context.Context) ([]byte, error) {
			close(running)
			<-release
			return []byte("ok"), nil
		})
		done <- err
	}()
	<-running
	code, body := a.call(t, "GET", "/api/stats", "tok")
	var s Stats
	if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil || len(s.InProgress) != 1 {
		t.Fatalf("stats: %d %s %v", code, body, err)
	}
	if k := s.InProgress[0]; k.ScopeHash != red.Scope("alice") || k.KeyHash != red.Key("alice", "k1") {
		t.Errorf("in progress %+v, want the keyed hashes %s %s", k, red.Scope("alice"), red.Key("alice", "k1"))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	code, body = a.call(t, "GET", "/api/keys?scope=alice&key=k1", "tok")
	var v struct{ Logged printed }
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil ||
		v.Logged != (printed{red.Scope("alice"), red.Key("alice", "k1")}) {
		t.Errorf("inspect: %d %s", code, body)
	}
}
