package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// edge is a gateway over real TCP in front of a real upstream, with a
// settable engine clock.
type edge struct {
	gw       *httptest.Server
	proxy    *Proxy
	store    store.Store
	calls    atomic.Int32
	clock    *testkit.Clock
	upstream *httptest.Server
}

func newEdge(t *testing.T, o Options, upstream http.HandlerFunc) *edge {
	t.Helper()
	return newEdgeOn(t, o, nil, upstream)
}

// newEdgeOn is newEdge with the engine's store wrapped by wrap, if not nil.
func newEdgeOn(t *testing.T, o Options, wrap func(store.Store) store.Store, upstream http.HandlerFunc) *edge {
	t.Helper()
	clock := testkit.NewClockAt(time.Now())
	e := &edge{store: memory.New(memory.WithClock(clock.Now)), clock: clock}
	var st store.Store = e.store
	if wrap != nil {
		st = wrap(st)
	}
	e.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		upstream(w, r)
	}))
	t.Cleanup(e.upstream.Close)
	o.Upstream, _ = url.Parse(e.upstream.URL)
	o.Engine = idem.New(st, idem.Policy{CleanupInterval: -1}, idem.WithClock(e.clock.Now), idem.WithLogger(quiet))
	e.proxy = mustProxy(t, o)
	e.gw = httptest.NewServer(e.proxy)
	t.Cleanup(func() {
		e.gw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.proxy.Wait(ctx)
	})
	return e
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) problem(t *testing.T) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		t.Fatalf("%d %q is not JSON: %v", a.status, a.body, err)
	}
	return p
}

func (e *edge) post(t *testing.T, path, key string, hdr ...string) answer {
	t.Helper()
	res := send(t, e.gw.URL+path, key, hdr...)
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{res.StatusCode, res.Header, string(b)}
}

// TestSlowUpstream: an upstream slower than upstream_timeout runs once in
// a retry loop. Its client gets 504 saying to retry with the same key;
// retries get 409 in_progress with Retry-After from the holder's lease,
// then the recorded outcome. Today's main answers 504 and releases the key:
// each retry ran the operation again.
func TestSlowUpstream(t *testing.T) {
	t.Parallel()
	var done atomic.Bool
	e := newEdge(t, Options{Middleware: idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "/", AnswerWithin: 200 * time.Millisecond}}}},
		func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(3 * time.Second) // retries come in progress for seconds, even on a loaded machine
			done.Store(true)
			w.WriteHeader(201)
			io.WriteString(w, `{"charge":"ch_1"}`)
		})
	first := e.post(t, "/charges", "slow")
	if first.status != 504 || !strings.Contains(first.body, "same Idempotency-Key") {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	var inProgress, replays int
	// Until the recorded outcome is replayed, within a generous bound.
	for end := time.Now().Add(30 * time.Second); replays < 3 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		a := e.post(t, "/charges", "slow")
		switch {
		case a.status == 409 && !done.Load():
			if p := a.problem(t); p["conflict_type"] != "in_progress" {
				t.Fatalf("retry: %v", p)
			}
			// On a still clock the holder has run 0 s: the shortest wait.
			if ra := a.header.Get("Retry-After"); ra != "1" {
				t.Errorf("Retry-After %q, want 1 (the holder has run 0 s on a still clock)", ra)
			}
			inProgress++
		case a.status == 201 && a.header.Get("Idempotent-Replayed") == "true" && a.body == `{"charge":"ch_1"}`:
			replays++
		case a.status == 409: // the upstream answered; its outcome is being recorded
		default:
			t.Fatalf("retry: %d %v %s", a.status, a.header, a.body)
		}
	}
	if n := e.calls.Load(); n != 1 || inProgress == 0 || replays == 0 {
		t.Fatalf("upstream ran %d times; %d in-progress answers, %d replays", n, inProgress, replays)
	}
}

// cutBody answers 201 with Content-Length 1000, half a body, and drops the
// connection.
func cutBody(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	brw.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	brw.WriteString(strings.Repeat("x", 500))
	brw.Flush()
	conn.Close()
}

// TestBodyCut: an upstream that sends 201 and half its body, then drops
// the connection, ran; whether its answer was success is unknown. It runs
// once; retries get 409 outcome_unknown naming the first request ID. Today's
// main released the key and each retry ran it again.
func TestBodyCut(t *testing.T) {
	t.Parallel()
	e := newEdge(t, Options{Middleware: idemhttp.Options{Profile: idemhttp.Stripe()}}, cutBody)
	first := e.post(t, "/charges", "cut", "X-Request-Id", "first-call")
	if first.status != 502 || !strings.Contains(first.body, "outcome is unknown") {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	for range 4 {
		a := e.post(t, "/charges", "cut")
		p := a.problem(t)
		if a.status != 409 || p["conflict_type"] != "outcome_unknown" || p["request_id"] != "first-call" {
			t.Fatalf("retry: %d %v", a.status, p)
		}
	}
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times", n)
	}
}

// TestUpstreamDeadline: an upstream that never answers is cut off at the
// deadline; the outcome is unknown, and the key is not released.
func TestUpstreamDeadline(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	defer close(stop)
	e := newEdge(t, Options{UpstreamDeadline: 300 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	if a := e.post(t, "/c", "k"); a.status != 504 || !strings.Contains(a.body, "may have run") {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if a := e.post(t, "/c", "k"); a.status != 409 || a.problem(t)["conflict_type"] != "outcome_unknown" {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times", n)
	}
}

// TestCallersApart: under the default configuration (no tenant), two
// callers with different credentials and one key each run once and never
// see the other's body; "Bearer T" and "bearer  T" are one caller. Today's
// main gave the second caller the first one's response.
func TestCallersApart(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	e := newEdge(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"charge":%d,"for":%q}`, n.Add(1), r.Header.Get("Authorization"))
	})
	alice := e.post(t, "/charges", "same", "Authorization", "Bearer alice-token")
	bob := e.post(t, "/charges", "same", "Authorization", "Bearer bob-token")
	if alice.status != 201 || bob.status != 201 || alice.body == bob.body || strings.Contains(bob.body, "alice") {
		t.Fatalf("alice %s, bob %s", alice.body, bob.body)
	}
	again := e.post(t, "/charges", "same", "Authorization", "bearer   alice-token")
	if again.body != alice.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice with the scheme in lower case: %s %v", again.body, again.header)
	}
	if got := e.calls.Load(); got != 2 {
		t.Fatalf("upstream ran %d times, want once per caller", got)
	}
}

// TestLeaseLostAnswersWhatRetriesGet: a holder paused past its lease (its
// upstream call stalls while the clock moves on) loses the key to a retry,
// which runs and records outcome B. The paused holder's outcome A cannot be
// recorded, so its client must get B, what every retry gets, never A.
// Today's main sent A.
func TestLeaseLostAnswersWhatRetriesGet(t *testing.T) {
	t.Parallel()
	pause := make(chan struct{})
	var n atomic.Int32
	e := newEdge(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		if i == 1 {
			<-pause
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"outcome":%d}`, i)
	})
	firstc := make(chan answer, 1)
	go func() { firstc <- e.post(t, "/charges", "k", "X-Request-Id", "paused") }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	e.clock.Add(2 * time.Minute)
	b := e.post(t, "/charges", "k", "X-Request-Id", "takeover")
	if b.status != 201 || b.body != `{"outcome":2}` {
		t.Fatalf("takeover: %d %s", b.status, b.body)
	}
	close(pause)
	a := <-firstc
	if a.body != b.body || a.header.Get("Original-Request-Id") != "takeover" {
		t.Fatalf("the paused holder's client got %d %s %v, want outcome 2", a.status, a.body, a.header)
	}
	if r := e.post(t, "/charges", "k"); r.body != b.body {
		t.Fatalf("retry: %s", r.body)
	}
}

// TestSlowBodyClients: clients that announce a 1 MB body and send 5 bytes
// are cut off after the body deadline and reserve nothing. Today's main
// kept them (and, with fingerprint none, their keys in progress) forever.
func TestSlowBodyClients(t *testing.T) {
	t.Parallel()
	e := newEdge(t, Options{Middleware: idemhttp.Options{BodyReadTimeout: 300 * time.Millisecond,
		Routes: []idemhttp.Route{{Pattern: "/", Fingerprint: idemhttp.FingerprintNone}}}}, created)
	addr := strings.TrimPrefix(e.gw.URL, "http://")
	testkit.FanOut(50, func(i int) {
		status, closed, err := testkit.SlowBody(addr, "/c", fmt.Sprint("slow-", i), "12345")
		switch {
		case err != nil:
			t.Errorf("held past the body deadline: %v", err)
		case status != http.StatusRequestTimeout:
			t.Errorf("status %d", status)
		case !closed:
			t.Error("connection still open")
		}
	})
	if n := e.calls.Load(); n != 0 {
		t.Fatalf("upstream ran %d times", n)
	}
	// The key is free: a complete request with it runs.
	if a := e.post(t, "/c", "slow-1"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("after: %d %v", a.status, a.header)
	}
}

func TestReplayHeadersRefused(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1")
	_, err := New(Options{Upstream: u, Engine: idem.New(memory.New(), idem.Policy{}), Logger: quiet,
		Middleware: idemhttp.Options{ReplayHeaders: []string{"Set-Cookie"}}})
	if !errors.Is(err, idemhttp.ErrCredentialHeader) {
		t.Fatalf("keep Set-Cookie: %v", err)
	}
}

// TestUpstreamErrorsInTheRoutesShape: the gateway's own 502 and 504 go
// through the route's profile: a mobile route answers in the app's
// envelope, not problem+json.
func TestUpstreamErrorsInTheRoutesShape(t *testing.T) {
	t.Parallel()
	e := newEdge(t, Options{Middleware: idemhttp.Options{Routes: []idemhttp.Route{
		{Pattern: "/app/", Profile: idemhttp.Mobile()}, {Pattern: "/"},
	}}}, cutBody)
	e.upstream.Close() // unreachable: nothing is sent
	for _, path := range []string{"/app/save", "/api/save"} {
		for _, key := range []string{"k", ""} {
			req, _ := http.NewRequest("POST", e.gw.URL+path, strings.NewReader(`{}`))
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			mobile := strings.HasPrefix(path, "/app/")
			if res.StatusCode != 502 || (body["success"] == false) != mobile || (res.Header.Get("Content-Type") == "application/problem+json") == mobile {
				t.Errorf("%s key %q: %d %s %v", path, key, res.StatusCode, res.Header.Get("Content-Type"), body)
			}
		}
	}
}

// TestTokenReachesUpstream: the upstream gets the reservation's fencing
// token next to the key, never one the client sent.
func TestTokenReachesUpstream(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 1)
	e := newEdge(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get(idemhttp.TokenHeader)
		created(w, r)
	})
	e.post(t, "/c", "k", idemhttp.TokenHeader, "1")
	if tok := <-seen; tok == "" || tok == "1" {
		t.Fatalf("upstream Idempotency-Token %q", tok)
	}
}

// TestAdminFindsScopeThroughRoutes: /keys takes method, path and tenant and
// finds the scope as the proxy's routes do (here the payments API's
// per-endpoint scope).
func TestAdminFindsScopeThroughRoutes(t *testing.T) {
	t.Parallel()
	e := newEdge(t, Options{Middleware: idemhttp.Options{Tenant: idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{{Pattern: "POST /charges", Profile: idemhttp.Stripe()}}}}, created)
	e.post(t, "/charges", "k1", "X-User-ID", "alice|x")
	admin := httptest.NewServer(Admin(AdminOptions{Store: e.store, Token: "tok", Logger: quiet, Scope: e.proxy.Routes().Scope}))
	defer admin.Close()
	get := func(q string) (int, string) {
		req, _ := http.NewRequest("GET", admin.URL+"/keys?"+q, nil)
		req.Header.Set("Authorization", "Bearer tok")
		res, b := testkit.Send(t, req)
		return res.StatusCode, string(b)
	}
	q := url.Values{"method": {"POST"}, "path": {"/charges"}, "tenant": {"alice|x"}, "key": {"k1"}}
	if code, body := get(q.Encode()); code != 200 || !strings.Contains(body, `"scope": "alice%7Cx|POST /charges"`) {
		t.Fatalf("/keys by route: %d %s", code, body)
	}
	q.Set("path", "/refunds")
	if code, _ := get(q.Encode()); code != 404 {
		t.Fatalf("/keys for a path no route covers: %d", code)
	}
}

// TestAbortRecordsUnknown: at shutdown, upstream calls still running (here
// one detached from its client, answered 504) are cut off, and their keys
// end as outcome unknown before the store closes, rather than staying in
// progress for another gateway to run again once the lease runs out. Wait
// returns once the outcome is recorded, not when the upstream handler
// returned, even on a store slow to record: the gateway closes its store
// after Wait.
func TestAbortRecordsUnknown(t *testing.T) {
	t.Parallel()
	for name, wrap := range map[string]func(store.Store) store.Store{
		"store":      nil,
		"slow store": func(s store.Store) store.Store { return slowComplete{s} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stop := make(chan struct{})
			defer close(stop)
			e := newEdgeOn(t, Options{Middleware: idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "/", AnswerWithin: 100 * time.Millisecond}}}},
				wrap, func(w http.ResponseWriter, r *http.Request) { <-stop })
			if a := e.post(t, "/c", "k"); a.status != 504 {
				t.Fatalf("first: %d %s", a.status, a.body)
			}
			e.proxy.Abort()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.proxy.Wait(ctx); err != nil {
				t.Fatal("the aborted call did not end")
			}
			if a := e.post(t, "/c", "k"); a.status != 409 || a.problem(t)["conflict_type"] != "outcome_unknown" {
				t.Fatalf("retry after Wait: %d %s, want the outcome recorded as unknown", a.status, a.body)
			}
			if n := e.calls.Load(); n != 1 {
				t.Fatalf("upstream ran %d times", n)
			}
		})
	}
}

// slowComplete takes its time to record an outcome, as a busy or distant
// store does.
type slowComplete struct{ store.Store }

func (s slowComplete) Complete(ctx context.Context, c store.Completion) error {
	time.Sleep(300 * time.Millisecond)
	return s.Store.Complete(ctx, c)
}
