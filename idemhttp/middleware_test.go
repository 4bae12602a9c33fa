package idemhttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// chargesAPI answers POST /charges with a charge numbered by execution, and
// a few headers of which only some may be replayed.
func chargesAPI(s *server, mux *http.ServeMux) {
	var n atomic.Int32
	mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := n.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", fmt.Sprintf("/charges/ch_%d", id))
		h.Set("ETag", fmt.Sprintf(`"v%d"`, id))
		h.Add("Link", "</docs>; rel=help")
		h.Set("Set-Cookie", fmt.Sprintf("session=s%d", id))
		h.Set("X-RateLimit-Remaining", fmt.Sprint(100-id))
		h.Set("X-Seen-Request-Id", r.Header.Get("X-Request-Id"))
		status := http.StatusCreated
		if s := r.URL.Query().Get("status"); s != "" {
			fmt.Sscan(s, &status)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"id":"ch_%d","request":%q}`, id, body)
	}))
	mux.HandleFunc("POST /refunds", s.counting(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"refund":true}`)
	}))
	mux.HandleFunc("GET /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[]`)
	}))
}

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, chargesAPI)
	first := s.do("POST", "/charges", `{"amount":1000}`, "Idempotency-Key", "k1", "X-Request-Id", "req-first")
	if first.Status != 201 || first.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	if first.Header.Get("Set-Cookie") == "" {
		t.Fatal("the first response lost its Set-Cookie")
	}
	again := s.do("POST", "/charges", `{"amount":1000}`, "Idempotency-Key", "k1", "X-Request-Id", "req-retry")
	sameResponse(t, first, again)
	for _, h := range []string{"Content-Type", "Location", "ETag", "Link"} {
		if again.Header.Get(h) != first.Header.Get(h) {
			t.Errorf("replayed %s %q, want %q", h, again.Header.Get(h), first.Header.Get(h))
		}
	}
	for _, h := range []string{"Set-Cookie", "X-Ratelimit-Remaining", "X-Seen-Request-Id"} {
		if v := again.Header.Get(h); v != "" {
			t.Errorf("replay repeated %s: %q", h, v)
		}
	}
	if again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Original-Request-Id") != "req-first" {
		t.Fatalf("replay headers: %v", again.Header)
	}
	if n := s.count("POST", "/charges", "k1"); n != 1 {
		t.Fatalf("executed %d times", n)
	}
	// Without a request ID, the handler gets a fresh one, and replays name it.
	first = s.do("POST", "/charges", `{}`, "Idempotency-Key", "k2")
	gen := first.Header.Get("X-Seen-Request-Id")
	if len(gen) != 32 {
		t.Fatalf("generated request id %q", gen)
	}
	if again := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k2"); again.Header.Get("Original-Request-Id") != gen {
		t.Fatalf("Original-Request-Id %q, want %q", again.Header.Get("Original-Request-Id"), gen)
	}
}

func TestConcurrentRequestsExecuteOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /slow", s.counting(func(w http.ResponseWriter, r *http.Request) {
			<-release
			fmt.Fprint(w, `{"done":true}`)
		}))
	})
	const n = 200
	// The racers wait for the one holder; FanOut runs on its own goroutine
	// so that the holder is released only once every other copy has had
	// its 409, which proves they were all in flight together.
	var conflicts atomic.Int32
	results := make([]*response, n)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.FanOut(n, func(i int) {
			req, _ := http.NewRequest("POST", s.url+"/slow", strings.NewReader(`{"x":1}`))
			req.Header.Set("Idempotency-Key", "race")
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 409 {
				conflicts.Add(1)
			}
			results[i] = &response{Status: res.StatusCode, Header: res.Header, Body: b}
		})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for conflicts.Load() < n-1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	<-done
	ok := 0
	for _, r := range results {
		if r == nil {
			continue // the client error is reported above
		}
		switch r.Status {
		case 200:
			ok++
		case 409:
			problem(t, r, 409, idemhttp.KindInProgress)
			if r.Header.Get("Retry-After") == "" {
				t.Fatal("409 in_progress without Retry-After")
			}
		default:
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
	}
	if ok != 1 || s.count("POST", "/slow", "race") != 1 {
		t.Fatalf("%d successes, %d executions; want 1 and 1", ok, s.count("POST", "/slow", "race"))
	}
}

func TestWaitReplaysToConcurrentCallers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	wait := idem.Policy{Wait: 10 * time.Second}
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "POST /slow", Policy: &wait}}}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /slow", s.counting(func(w http.ResponseWriter, r *http.Request) {
			<-release
			fmt.Fprint(w, `{"done":true}`)
		}))
	})
	got := make(chan []testkit.Response)
	go func() {
		got <- testkit.SameKey(context.Background(), nil, 20, testkit.Request{URL: s.url + "/slow", Key: "w",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: `{}`})
	}()
	time.Sleep(100 * time.Millisecond)
	close(release)
	for _, r := range <-got {
		if r.Err != nil || r.Status != 200 || string(r.Body) != `{"done":true}` {
			t.Fatalf("%d %s %v", r.Status, r.Body, r.Err)
		}
	}
	if n := s.count("POST", "/slow", "w"); n != 1 {
		t.Fatalf("executed %d times", n)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, chargesAPI)
	first := s.do("POST", "/charges", `{"amount":1000,"currency":"eur"}`, "Idempotency-Key", "k")
	// Reordered members and white space: the same request.
	again := s.do("POST", "/charges", "{ \"currency\": \"eur\",\n \"amount\": 1000 }", "Idempotency-Key", "k")
	sameResponse(t, first, again)
	// A changed value, or another query string, is another request.
	problem(t, s.do("POST", "/charges", `{"amount":1001,"currency":"eur"}`, "Idempotency-Key", "k"), 422, idemhttp.KindPayloadMismatch)
	problem(t, s.do("POST", "/charges?status=201", `{"amount":1000,"currency":"eur"}`, "Idempotency-Key", "k"), 422, idemhttp.KindPayloadMismatch)
	// Another endpoint: the key is bound to /charges.
	p := problem(t, s.do("POST", "/refunds", `{"amount":1000,"currency":"eur"}`, "Idempotency-Key", "k"), 422, idemhttp.KindKeyReused)
	if p["idempotency_key"] != "k" {
		t.Fatalf("problem %v", p)
	}
	if s.total() != 1 {
		t.Fatalf("%d executions, want 1", s.total())
	}
}

func TestKeyHeader(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, chargesAPI)
	for name, headers := range map[string][]string{
		"300-byte key":     {"Idempotency-Key", strings.Repeat("k", 300)},
		"blank key":        {"Idempotency-Key", "   "},
		"empty key":        {"Idempotency-Key", ""},
		"two fields":       {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		"bad sf string":    {"Idempotency-Key", `"unterminated`},
		"sf token not str": {"Idempotency-Key", `"a";x=?2`},
	} {
		t.Run(name, func(t *testing.T) {
			kind := idemhttp.KindInvalidKey
			if name == "two fields" {
				kind = idemhttp.KindMultipleKeys
			}
			problem(t, s.do("POST", "/charges", `{}`, headers...), 400, kind)
		})
	}
	if s.total() != 0 {
		t.Fatalf("the API was called %d times for invalid keys", s.total())
	}
	// The draft's Structured Field string and Stripe's bare token name the
	// same key.
	first := s.do("POST", "/charges", `{}`, "Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	again := s.do("POST", "/charges", `{}`, "Idempotency-Key", `8e03978e-40d5-43e8-bc93-6894a57f9324`)
	sameResponse(t, first, again)
	// A key of exactly 255 bytes is fine.
	if r := s.do("POST", "/charges", `{}`, "Idempotency-Key", strings.Repeat("k", 255)); r.Status != 201 {
		t.Fatalf("255-byte key: %d %s", r.Status, r.Body)
	}
}

func TestKeyRequiredOrOptional(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{
		{Pattern: "POST /charges", Key: idemhttp.KeyRequired},
		{Pattern: "POST /refunds"},
	}}, chargesAPI)
	problem(t, s.do("POST", "/charges", `{}`), 400, idemhttp.KindMissingKey)
	s.do("POST", "/refunds", `{}`)
	s.do("POST", "/refunds", `{}`)
	if n := s.count("POST", "/refunds", ""); n != 2 {
		t.Fatalf("unkeyed optional requests ran %d times, want 2", n)
	}
	// Safe methods pass through untouched, key or not.
	s.do("GET", "/charges", "", "Idempotency-Key", "g")
	s.do("GET", "/charges", "", "Idempotency-Key", "g")
	if n := s.count("GET", "/charges", "g"); n != 2 {
		t.Fatalf("GET ran %d times, want 2", n)
	}
}

func TestFailuresAndCachedStatuses(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, chargesAPI)
	// 500: released, the retry runs again.
	r1 := s.do("POST", "/charges?status=500", `{}`, "Idempotency-Key", "k500")
	r2 := s.do("POST", "/charges?status=500", `{}`, "Idempotency-Key", "k500")
	if r1.Status != 500 || r2.Status != 500 || string(r1.Body) == string(r2.Body) {
		t.Fatalf("500s: %s / %s", r1.Body, r2.Body)
	}
	if n := s.count("POST", "/charges", "k500"); n != 2 {
		t.Fatalf("a released 500 ran %d times, want 2", n)
	}
	// 409 from the API: a deterministic answer, cached.
	c1 := s.do("POST", "/charges?status=409", `{}`, "Idempotency-Key", "k409")
	c2 := s.do("POST", "/charges?status=409", `{}`, "Idempotency-Key", "k409")
	sameResponse(t, c1, c2)
	if n := s.count("POST", "/charges", "k409"); n != 1 || c2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("409 ran %d times", n)
	}
	// 400: not cached, the client may fix its request... with a new body.
	s.do("POST", "/charges?status=400", `{}`, "Idempotency-Key", "k400")
	s.do("POST", "/charges?status=400", `{}`, "Idempotency-Key", "k400")
	if n := s.count("POST", "/charges", "k400"); n != 2 {
		t.Fatalf("400 ran %d times, want 2", n)
	}
}

func TestTenants(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantHeader("X-User-ID")}, chargesAPI)
	a := s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same", "X-User-ID", "alice")
	b := s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same", "X-User-ID", "bob")
	if a.Status != 201 || b.Status != 201 || string(a.Body) == string(b.Body) {
		t.Fatalf("tenants share a record: %s / %s", a.Body, b.Body)
	}
	sameResponse(t, a, s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same", "X-User-ID", "alice"))
	sameResponse(t, b, s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same", "X-User-ID", "bob"))
	if n := s.count("POST", "/charges", "same"); n != 2 {
		t.Fatalf("executed %d times, want 2 (once per tenant)", n)
	}
	// A keyed request without a tenant: 401, never a shared scope.
	problem(t, s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same"), 401, idemhttp.KindTenantRequired)
	// Tenants that try to look like another scope stay apart.
	s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "same", "X-User-ID", "alice|x")
	if n := s.count("POST", "/charges", "same"); n != 3 {
		t.Fatalf("executed %d times, want 3", n)
	}
	// Authorization hashes are tenants too.
	s2 := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantFromHeaders("Authorization")}, chargesAPI)
	x := s2.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer token-x")
	y := s2.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer token-y")
	if string(x.Body) == string(y.Body) {
		t.Fatal("two Authorization values share a record")
	}
	problem(t, s2.do("POST", "/charges", `{}`, "Idempotency-Key", "k"), 401, idemhttp.KindTenantRequired)
}

func TestLargeAndStreamedResponsesAreNotReplayed(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 2048)
	s := newServer(t, idemhttp.Options{MaxResponseBytes: 1024}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /big", s.counting(func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(big); i += 100 {
				io.WriteString(w, big[i:min(i+100, len(big))])
			}
		}))
		mux.HandleFunc("POST /events", s.counting(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				http.NewResponseController(w).Flush()
			}
		}))
	})
	r := s.do("POST", "/big", `{}`, "Idempotency-Key", "b")
	if r.Status != 200 || string(r.Body) != big {
		t.Fatalf("large first response: %d, %d bytes", r.Status, len(r.Body))
	}
	problem(t, s.do("POST", "/big", `{}`, "Idempotency-Key", "b"), 409, idemhttp.KindResponseNotStored)
	e := s.do("POST", "/events", `{}`, "Idempotency-Key", "e")
	if string(e.Body) != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %q", e.Body)
	}
	problem(t, s.do("POST", "/events", `{}`, "Idempotency-Key", "e"), 409, idemhttp.KindResponseNotStored)
	if s.total() != 2 {
		t.Fatalf("%d executions, want 2", s.total())
	}
}

func TestStreamIsFlushedAsWritten(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /events", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
			<-next
			fmt.Fprint(w, "data: second\n\n")
		})
	})
	req, _ := http.NewRequest("POST", s.url+"/events", nil)
	req.Header.Set("Idempotency-Key", "stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event before the handler ended: %q %v", line, err)
	}
	close(next)
}

func TestHijackThroughTheWrapper(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /upgrade", s.counting(func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			brw.Flush()
		}))
	})
	r := s.do("POST", "/upgrade", ``, "Idempotency-Key", "h")
	if r.Status != 200 || string(r.Body) != "hi" {
		t.Fatalf("hijacked response: %d %q", r.Status, r.Body)
	}
	// The client read its bytes before the handler returned and the
	// outcome was recorded: until then a retry sees the key in progress.
	retry := s.do("POST", "/upgrade", ``, "Idempotency-Key", "h")
	for end := time.Now().Add(5 * time.Second); strings.Contains(string(retry.Body), "in_progress") && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
		retry = s.do("POST", "/upgrade", ``, "Idempotency-Key", "h")
	}
	problem(t, retry, 409, idemhttp.KindResponseNotStored)
}

func TestRequestTooLarge(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{MaxRequestBytes: 64}, chargesAPI)
	problem(t, s.do("POST", "/charges", `{"pad":"`+strings.Repeat("x", 100)+`"}`, "Idempotency-Key", "big"), 413, idemhttp.KindRequestTooLarge)
	if s.total() != 0 {
		t.Fatal("a too-large request ran")
	}
}

type downStore struct{ store.Store }

func (downStore) Reserve(context.Context, store.ReserveRequest) (store.Reservation, error) {
	return store.Reservation{}, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	run := func(p idem.Policy) (*response, int) {
		var n atomic.Int32
		eng := idem.New(downStore{memory.New()}, p, quietOpt)
		mw, _ := idemhttp.New(eng, idemhttp.Options{Logger: quiet, SharedAnonymousScope: true})
		ts := newTestServer(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.WriteHeader(201)
		})))
		s := &server{t: t, url: ts}
		return s.do("POST", "/x", `{}`, "Idempotency-Key", "k"), int(n.Load())
	}
	r, n := run(idem.Policy{CleanupInterval: -1})
	p := problem(t, r, 503, idemhttp.KindStoreUnavailable)
	if r.Header.Get("Retry-After") == "" || n != 0 {
		t.Fatalf("fail closed: Retry-After %q, ran %d; %v", r.Header.Get("Retry-After"), n, p)
	}
	r, n = run(idem.Policy{CleanupInterval: -1, OnStoreError: idem.OnStoreErrorFailOpen})
	if r.Status != 201 || n != 1 {
		t.Fatalf("fail open: %d, ran %d", r.Status, n)
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	for _, o := range []idemhttp.Options{
		{Routes: []idemhttp.Route{{Pattern: "POST /a"}, {Pattern: "POST /a"}}},
		{Routes: []idemhttp.Route{{Pattern: "POST /{"}}},
		{ReplayHeaders: []string{"set-cookie"}},
		{Routes: []idemhttp.Route{{Pattern: "POST /a", Policy: &idem.Policy{TTL: -1}}}},
	} {
		if _, err := idemhttp.New(eng, o); err == nil {
			t.Errorf("%+v: no error", o.Routes)
		}
	}
	if _, err := idemhttp.New(nil, idemhttp.Options{}); err == nil {
		t.Error("nil engine accepted")
	}
}

func TestUncleanPathIsCovered(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "POST /api/charges", Key: idemhttp.KeyRequired}}}, func(s *server, mux *http.ServeMux) {
		h := s.counting(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
		mux.HandleFunc("POST /api/charges", h)
	})
	// Go's client cleans nothing: the server sees the double slash.
	problem(t, s.do("POST", "/api//charges", `{}`), 400, idemhttp.KindMissingKey)
}

func TestNotExecutedReleasesTheKey(t *testing.T) {
	t.Parallel()
	// Under the stripe profile every status is an outcome, but a handler
	// that did nothing (an unreachable upstream) frees the key.
	var reachable atomic.Bool
	s := newServer(t, idemhttp.Options{Profile: idemhttp.Stripe()}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
			if !reachable.Load() {
				idemhttp.ReportNotExecuted(w)
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
	})
	if r := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k"); r.Status != 502 {
		t.Fatalf("%d", r.Status)
	}
	reachable.Store(true)
	if r := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k"); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("after the upstream came back: %d %v", r.Status, r.Header)
	}
	// A plain 502 from the handler is an outcome under stripe.
	s.do("POST", "/charges?x", `{}`, "Idempotency-Key", "k2")
	if n := s.count("POST", "/charges", "k"); n != 2 {
		t.Fatalf("ran %d", n)
	}
	// Outside the middleware it is harmless.
	idemhttp.ReportNotExecuted(httptest.NewRecorder())
}

func TestObserve(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	s := newServer(t, idemhttp.Options{
		Routes: []idemhttp.Route{{Pattern: "POST /charges"}},
		Observe: func(_ *http.Request, e idemhttp.Event) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%s %s %s %d", e.Route, e.Outcome, e.Kind, e.Status))
			mu.Unlock()
		},
	}, chargesAPI)
	s.do("GET", "/charges", "")
	s.do("POST", "/refunds", `{}`, "Idempotency-Key", "k")
	s.do("POST", "/charges", `{}`, "Idempotency-Key", "k")
	s.do("POST", "/charges", `{}`, "Idempotency-Key", "k")
	s.do("POST", "/charges", `{"x":1}`, "Idempotency-Key", "k")
	s.do("POST", "/charges", `{}`)
	want := []string{
		" pass_through  0", " unrouted  0",
		"POST /charges executed  201", "POST /charges replayed  201",
		"POST /charges rejected payload_mismatch 422", "POST /charges pass_through  0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events\n %q\nwant\n %q", got, want)
	}
}
