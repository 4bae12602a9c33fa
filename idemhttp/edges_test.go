package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
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

// TestOverrideScope: a route that overrides its scope with a function field
// keeps every other decision of its profile. The same requests go to a
// route with the defaults and to one whose keys are shared per organization;
// they answer alike, byte for byte, and only where records live differs.
func TestOverrideScope(t *testing.T) {
	t.Parallel()
	orgScope := func(r *http.Request, tenant string) string {
		return idemhttp.ScopeTenantEndpoint.Format("org:"+r.Header.Get("X-Org-ID"), r.Method, r.URL.Path)
	}
	plain := newServer(t, idemhttp.Options{Profile: idemhttp.Stripe(), Tenant: idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{{Pattern: "POST /charges"}, {Pattern: "POST /refunds"}}}, chargesAPI)
	org := newServer(t, idemhttp.Options{Profile: idemhttp.Stripe(), Tenant: idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{{Pattern: "POST /charges", Scope: orgScope}, {Pattern: "POST /refunds", Scope: orgScope}}}, chargesAPI)
	steps := []struct{ path, body, key string }{
		{"/charges", `{"amount":1}`, "k1"},  // first execution
		{"/charges", `{"amount":1}`, "k1"},  // replay
		{"/charges", `{"amount":2}`, "k1"},  // payload mismatch
		{"/charges", `{"amount":1}`, `"k1`}, // invalid key
		{"/charges?status=500", `{}`, "k2"}, // a 500, kept under this profile
		{"/charges?status=500", `{}`, "k2"}, // and replayed
		{"/refunds", `{"amount":1}`, "k1"},  // another endpoint, another scope
		{"/charges", `{"amount":1}`, "k1"},  // still the first outcome
	}
	for i, st := range steps {
		a := plain.do("POST", st.path, st.body, "Idempotency-Key", st.key, "X-User-ID", "alice", "X-Org-ID", "acme", "X-Request-Id", fmt.Sprint("r", i))
		b := org.do("POST", st.path, st.body, "Idempotency-Key", st.key, "X-User-ID", "alice", "X-Org-ID", "acme", "X-Request-Id", fmt.Sprint("r", i))
		sameResponse(t, a, b)
		for _, h := range []string{"Content-Type", "Idempotent-Replayed", "Original-Request-Id", "Location", "Retry-After"} {
			if a.Header.Get(h) != b.Header.Get(h) {
				t.Errorf("step %d: %s %q vs %q", i, h, a.Header.Get(h), b.Header.Get(h))
			}
		}
	}
	if plain.total() != org.total() {
		t.Fatalf("executions %d vs %d", plain.total(), org.total())
	}
	// Bob in the same organization shares acme's keys on the overridden
	// route only.
	if r := org.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "k1", "X-User-ID", "bob", "X-Org-ID", "acme"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("bob in acme: %d %v", r.Status, r.Header)
	}
	if r := plain.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "k1", "X-User-ID", "bob", "X-Org-ID", "acme"); r.Header.Get("Idempotent-Replayed") != "false" {
		t.Errorf("bob on the plain route: %d %v", r.Status, r.Header)
	}
	ctx := context.Background()
	if _, err := org.store.Get(ctx, "org:acme|POST /charges", storeHash("org:acme|POST /charges", "k1")); err != nil {
		t.Errorf("the record is not in the overridden scope: %v", err)
	}
	if _, err := plain.store.Get(ctx, "alice|POST /charges", storeHash("alice|POST /charges", "k1")); err != nil {
		t.Errorf("the default scope moved: %v", err)
	}
}

// TestDefaultTenantIsTheCaller: with no tenant configured, two callers
// with different credentials and one key each run once and never see the
// other's response; the scheme's case and white space do not make a new
// caller; callers without credentials share the anonymous scope.
func TestDefaultTenantIsTheCaller(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{}, chargesAPI)
	a := s.do("POST", "/charges", `{}`, "Idempotency-Key", "same", "Authorization", "Bearer token-a")
	b := s.do("POST", "/charges", `{}`, "Idempotency-Key", "same", "Authorization", "Bearer token-b")
	if a.Status != 201 || b.Status != 201 || string(a.Body) == string(b.Body) || b.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("two callers share a key: %s / %s", a.Body, b.Body)
	}
	for _, auth := range []string{"bearer token-a", "BEARER   token-a", " Bearer\ttoken-a "} {
		sameResponse(t, a, s.do("POST", "/charges", `{}`, "Idempotency-Key", "same", "Authorization", auth))
	}
	if r := s.do("POST", "/charges", `{}`, "Idempotency-Key", "same", "Authorization", "Bearer TOKEN-A"); string(r.Body) == string(a.Body) {
		t.Error("the credentials themselves were compared without case")
	}
	anon := s.do("POST", "/charges", `{}`, "Idempotency-Key", "same")
	sameResponse(t, anon, s.do("POST", "/charges", `{}`, "Idempotency-Key", "same"))
	if n := s.count("POST", "/charges", "same"); n != 4 {
		t.Fatalf("executed %d times, want 4 (a, b, TOKEN-A, anonymous)", n)
	}
	// TenantNone shares on purpose; TenantFromHeaders combines sources.
	shared := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantNone}, chargesAPI)
	x := shared.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a")
	sameResponse(t, x, shared.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer b"))
	combo := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantFromHeaders("Authorization", "Stripe-Account")}, chargesAPI)
	p := combo.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a", "Stripe-Account", "acct_1")
	q := combo.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a", "Stripe-Account", "acct_2")
	if string(p.Body) == string(q.Body) {
		t.Error("two connected accounts share a key")
	}
	sameResponse(t, p, combo.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Authorization", "bearer a", "Stripe-Account", "acct_1"))
}

func TestReplayHeadersRefusesCredentials(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	for _, h := range []string{"Set-Cookie", "authorization", "Proxy-Authorization"} {
		_, err := idemhttp.New(eng, idemhttp.Options{ReplayHeaders: []string{"X-Charge-Id", h}})
		if !errors.Is(err, idemhttp.ErrCredentialHeader) {
			t.Errorf("ReplayHeaders %s: %v", h, err)
		}
		_, err = idemhttp.New(eng, idemhttp.Options{ReplayHeaders: []string{h}, AllowCredentialHeaders: true})
		if h == "Proxy-Authorization" {
			// Hop-by-hop: a replay never repeats it, forced or not.
			if !errors.Is(err, idemhttp.ErrFramingHeader) {
				t.Errorf("forced %s: %v, want ErrFramingHeader", h, err)
			}
		} else if err != nil {
			t.Errorf("forced %s: %v", h, err)
		}
	}
	for _, h := range []string{"Content-Length", "transfer-encoding", "Connection", "Keep-Alive", "Upgrade", "Trailer", "TE", "Proxy-Authenticate"} {
		if _, err := idemhttp.New(eng, idemhttp.Options{ReplayHeaders: []string{h}}); !errors.Is(err, idemhttp.ErrFramingHeader) {
			t.Errorf("ReplayHeaders %s: %v, want ErrFramingHeader", h, err)
		}
	}
}

// TestSlowBodyReservesNothing: clients that announce a large body and send
// five bytes are cut off after the body deadline with 408, nothing is
// reserved (even where the fingerprint ignores the body), and their
// connections and goroutines come back. Not parallel: it counts the
// process's descriptors and goroutines, which other tests would move.
func TestSlowBodyReservesNothing(t *testing.T) {
	s := newServer(t, idemhttp.Options{BodyReadTimeout: 300 * time.Millisecond,
		Routes: []idemhttp.Route{{Pattern: "POST /charges", Fingerprint: idemhttp.FingerprintNone}}}, chargesAPI)
	addr := strings.TrimPrefix(s.url, "http://")
	fdsBefore, goBefore := openFDs(), runtime.NumGoroutine()
	const n = 100
	var cut atomic.Int32
	testkit.FanOut(n, func(i int) {
		status, closed, err := testkit.SlowBody(addr, "/charges", fmt.Sprint("slow-", i), `{"a":`)
		switch {
		case err != nil:
			t.Error(err)
		case status != http.StatusRequestTimeout:
			t.Errorf("status %d", status)
		case !closed:
			t.Error("connection still open")
		default:
			cut.Add(1)
		}
	})
	if cut.Load() != n {
		t.Fatalf("%d of %d slow clients cut off", cut.Load(), n)
	}
	for i := range n {
		k := fmt.Sprint("slow-", i)
		if _, err := s.store.Get(context.Background(), "", storeHash("", k)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s reserved: %v", k, err)
		}
	}
	if s.total() != 0 {
		t.Fatalf("the handler ran %d times", s.total())
	}
	deadline := time.Now().Add(5 * time.Second)
	for openFDs() > fdsBefore+5 || runtime.NumGoroutine() > goBefore+5 {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors %d (before %d), goroutines %d (before %d)", openFDs(), fdsBefore, runtime.NumGoroutine(), goBefore)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openFDs() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}

// TestAnswerWithin: a handler slower than the route's AnswerWithin runs
// once; its client gets 504 saying to retry with the same key, retries get
// 409 in_progress with a Retry-After from how long the holder has run,
// capped by its lease, then the recorded outcome.
func TestAnswerWithin(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "POST /slow", AnswerWithin: 100 * time.Millisecond}}},
		func(s *server, mux *http.ServeMux) {
			mux.HandleFunc("POST /slow", s.counting(func(w http.ResponseWriter, r *http.Request) {
				<-release
				w.WriteHeader(201)
				fmt.Fprint(w, `{"done":true}`)
			}))
		})
	first := s.do("POST", "/slow", `{}`, "Idempotency-Key", "k")
	p := problem(t, first, 504, idemhttp.KindUpstreamTimeout)
	if !strings.Contains(p["detail"].(string), "same Idempotency-Key") {
		t.Errorf("504 detail %q", p["detail"])
	}
	// The holder has run 7 s on the test clock (which renewals do not move
	// past its 60 s lease): come back in about as long again.
	s.clock.Add(7 * time.Second)
	retry := s.do("POST", "/slow", `{}`, "Idempotency-Key", "k")
	problem(t, retry, 409, idemhttp.KindInProgress)
	if ra := retry.Header.Get("Retry-After"); ra != "7" {
		t.Errorf("Retry-After %q, want 7 (as long as the holder has run, within its lease)", ra)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := s.do("POST", "/slow", `{}`, "Idempotency-Key", "k")
		if r.Status == 201 {
			if r.Header.Get("Idempotent-Replayed") != "true" || string(r.Body) != `{"done":true}` {
				t.Fatalf("replay %v %s", r.Header, r.Body)
			}
			break
		}
		if r.Status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry %d %s", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.total(); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// TestAnswerWithinAtTheDeadline: handlers that end about when their
// route's answer deadline passes, so that the deadline and the end race,
// among quick calls on a route with a long deadline (the same pool of
// attempts serves both). Each slow call is answered with its outcome or a
// 504 and runs once; a later retry gets the outcome; no quick call is ever
// answered 504 (an attempt pooled with the deadline's event left in it
// would be).
func TestAnswerWithinAtTheDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{
		{Pattern: "POST /edge", AnswerWithin: 2 * time.Millisecond},
		{Pattern: "POST /quick", AnswerWithin: time.Minute},
	}}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /edge", s.counting(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			w.WriteHeader(201)
			fmt.Fprint(w, `{"done":true}`)
		}))
		mux.HandleFunc("POST /quick", s.counting(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	})
	var timedOut, answered atomic.Int32
	testkit.FanOut(8, func(g int) {
		for i := range 60 {
			key := fmt.Sprintf("edge-%d-%d", g, i)
			switch r := s.do("POST", "/edge", `{}`, "Idempotency-Key", key); r.Status {
			case 201:
				answered.Add(1)
			case 504:
				timedOut.Add(1)
			default:
				t.Errorf("%s: %d %s", key, r.Status, r.Body)
			}
			if r := s.do("POST", "/quick", `{}`, "Idempotency-Key", "quick-"+key); r.Status != 201 {
				t.Errorf("quick call %s: %d %s", key, r.Status, r.Body)
			}
		}
	})
	t.Logf("%d answered, %d timed out", answered.Load(), timedOut.Load())
	for g := range 8 {
		for i := range 60 {
			key := fmt.Sprintf("edge-%d-%d", g, i)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				r := s.do("POST", "/edge", `{}`, "Idempotency-Key", key)
				if r.Status == 201 && r.Header.Get("Idempotent-Replayed") == "true" {
					break
				}
				if r.Status != 409 || time.Now().After(deadline) {
					t.Fatalf("retry of %s: %d %s", key, r.Status, r.Body)
				}
			}
		}
	}
	if n := s.total(); n != 2*8*60 {
		t.Fatalf("ran %d times, want %d", n, 2*8*60)
	}
}

// TestLeaseLostResponseNotSent: a holder paused past its lease loses the
// key to a retry, which runs and records its outcome. When the paused
// holder finishes, its outcome cannot be recorded, and its client must not
// be told that outcome: it gets what every retry gets, the new holder's.
func TestLeaseLostResponseNotSent(t *testing.T) {
	t.Parallel()
	pause := make(chan struct{})
	var n atomic.Int32
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
			i := n.Add(1)
			if i == 1 {
				<-pause
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"charge":%d}`, i)
		}))
	})
	firstc := make(chan *response)
	go func() { firstc <- s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Request-Id", "paused") }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	s.clock.Add(2 * time.Minute) // the first holder's lease runs out
	second := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Request-Id", "takeover")
	if second.Status != 201 || string(second.Body) != `{"charge":2}` {
		t.Fatalf("takeover: %d %s", second.Status, second.Body)
	}
	close(pause)
	first := <-firstc
	if string(first.Body) == `{"charge":1}` {
		t.Fatal("the paused holder's unrecorded outcome was sent")
	}
	sameResponse(t, second, first)
	if first.Header.Get("Original-Request-Id") != "takeover" {
		t.Errorf("first: %v", first.Header)
	}
	sameResponse(t, second, s.do("POST", "/charges", `{}`, "Idempotency-Key", "k"))
}

// TestOutcomeUnknownIsNeverReleased: a handler that says its request left
// without a complete answer (OutcomeUnknown), or that panics after it
// started (ReverseProxy's http.ErrAbortHandler on a body cut off), runs
// once; every retry gets 409 outcome_unknown naming the first request, even
// under the payments profile that keeps every status. Under OnUnknownRelease
// the key is released on purpose.
func TestOutcomeUnknownIsNeverReleased(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		profile *idemhttp.Profile
		end     func(w http.ResponseWriter)
	}{
		{"said", idemhttp.IETF(), func(w http.ResponseWriter) {
			idemhttp.ReportOutcomeUnknown(w)
			w.WriteHeader(http.StatusBadGateway)
		}},
		{"said under stripe", idemhttp.Stripe(), func(w http.ResponseWriter) {
			idemhttp.ReportOutcomeUnknown(w)
			w.WriteHeader(http.StatusGatewayTimeout)
		}},
		{"body cut", idemhttp.IETF(), func(w http.ResponseWriter) {
			w.WriteHeader(201)
			w.Write([]byte(`{"half":`))
			panic(http.ErrAbortHandler)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, idemhttp.Options{Profile: tc.profile}, func(s *server, mux *http.ServeMux) {
				mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) { tc.end(w) }))
			})
			first := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Request-Id", "first-req")
			if first.Status < 500 {
				t.Fatalf("first: %d %s", first.Status, first.Body)
			}
			for range 3 {
				p := problem(t, s.do("POST", "/charges", `{}`, "Idempotency-Key", "k"), 409, idemhttp.KindOutcomeUnknown)
				if p["request_id"] != "first-req" || !strings.Contains(p["detail"].(string), "first-req") {
					t.Fatalf("problem %v does not name the first request", p)
				}
			}
			if n := s.total(); n != 1 {
				t.Fatalf("ran %d times", n)
			}
		})
	}
	t.Run("release", func(t *testing.T) {
		pol := idem.Policy{OnUnknown: idem.OnUnknownRelease}
		s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{{Pattern: "/", Policy: &pol}}}, func(s *server, mux *http.ServeMux) {
			mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
				idemhttp.ReportOutcomeUnknown(w)
				w.WriteHeader(http.StatusBadGateway)
			}))
		})
		s.do("POST", "/charges", `{}`, "Idempotency-Key", "k")
		s.do("POST", "/charges", `{}`, "Idempotency-Key", "k")
		if n := s.total(); n != 2 {
			t.Fatalf("ran %d times, want 2 (released on purpose)", n)
		}
	})
}

// TestTokenForwarded: the handler sees the reservation's fencing token in
// Idempotency-Token, never one the client sent.
func TestTokenForwarded(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 2)
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Get(idemhttp.TokenHeader)
			w.WriteHeader(201)
		})
	})
	s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", idemhttp.TokenHeader, "1")
	s.do("POST", "/charges", `{}`, "Idempotency-Key", "k2")
	a, b := <-seen, <-seen
	if a == "" || a == "1" || b == "" || a == b {
		t.Fatalf("tokens %q, %q", a, b)
	}
}

// failComplete is a store whose writes of outcomes fail for good.
type failComplete struct{ store.Store }

func (failComplete) Complete(context.Context, store.Completion) error { return store.ErrClosed }

// TestUnrecordedOutcomeNotSent: when the store fails as the outcome is
// written, the handler's response is never sent (a retry could not replay
// it): the client gets 503 outcome_not_recorded, saying the call may have
// run and to retry with the same key.
func TestUnrecordedOutcomeNotSent(t *testing.T) {
	t.Parallel()
	eng := idem.New(failComplete{memory.New()}, idem.Policy{CleanupInterval: -1}, quietOpt)
	defer eng.Close()
	mw, err := idemhttp.New(eng, idemhttp.Options{Logger: quiet, SharedAnonymousScope: true})
	if err != nil {
		t.Fatal(err)
	}
	url := newTestServer(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, `{"charge":"ch_1"}`)
	})))
	s := &server{t: t, url: url}
	r := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Request-Id", "r1")
	p := problem(t, r, 503, idemhttp.KindOutcomeNotRecorded)
	if strings.Contains(string(r.Body), "ch_1") || p["request_id"] != "r1" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
	}
}

// TestCutPassingBodyAborts: a response too large to hold passes through as
// it is written; when its handler is cut off mid-body (ReverseProxy's
// http.ErrAbortHandler), the client's connection is aborted, so that a
// chunked body does not end as if it were whole, and the key answers
// outcome_unknown.
func TestCutPassingBodyAborts(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{MaxResponseBytes: 16}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /export", s.counting(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.Write([]byte(strings.Repeat("row\n", 100)))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}))
	})
	req, _ := http.NewRequest("POST", s.url+"/export", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Fatal("the cut response reached the client as if it were whole")
	}
	problem(t, s.do("POST", "/export", `{}`, "Idempotency-Key", "k"), 409, idemhttp.KindOutcomeUnknown)
	if n := s.total(); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// TestHangUpKeepsLease: the client hangs up while the handler runs, and the
// handler runs on past its lease without looking at its context. The lease
// is still renewed: retries get 409 in_progress, then the handler's one
// outcome, and it runs once. (A lease that lapsed when the client went
// away would let a retry take the key over and charge twice.)
func TestHangUpKeepsLease(t *testing.T) {
	t.Parallel()
	const lease = 150 * time.Millisecond
	eng := idem.New(memory.New(), idem.Policy{Lease: lease, CleanupInterval: -1})
	defer eng.Close()
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	h := idemhttp.Middleware(eng, idemhttp.Options{Logger: quiet, SharedAnonymousScope: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		started <- struct{}{}
		time.Sleep(8 * lease)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "hang-up")
		return srv.Client().Do(req)
	}
	ctx, hangUp := context.WithCancel(context.Background())
	go func() {
		if res, err := post(ctx); err == nil {
			res.Body.Close()
		}
	}()
	<-started
	hangUp()
	var conflicts int
	for deadline := time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("no outcome within 10 s")
		}
		time.Sleep(lease / 2)
		res, err := post(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusConflict {
			conflicts++
			continue
		}
		if res.StatusCode != http.StatusCreated || string(body) != `{"charge":1}` {
			t.Fatalf("retry: %d %s", res.StatusCode, body)
		}
		break
	}
	if n := runs.Load(); n != 1 || conflicts == 0 {
		t.Fatalf("the handler ran %d times; %d retries answered in_progress", n, conflicts)
	}
}
