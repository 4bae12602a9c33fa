package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
)

// expiryServer is an API behind the middleware over TCP whose answers
// reach every kind of answer about an existing record.
type expiryServer struct {
	*server
	eng     *idem.Engine
	routes  *idemhttp.Routes
	release chan struct{} // ends POST /slow: closed once the test is done with it, or ends
	started chan struct{} // POST /slow began
	once    sync.Once
}

func newExpiryServer(t *testing.T) *expiryServer {
	t.Helper()
	clock := testkit.NewClock()
	s := &expiryServer{
		server:  &server{t: t, clock: clock, store: memory.New(memory.WithClock(clock.Now)), counts: map[string]int{}},
		release: make(chan struct{}), started: make(chan struct{}, 1),
	}
	s.eng = idem.New(s.store, idem.Policy{CleanupInterval: -1}, idem.WithClock(s.clock.Now), quietOpt)
	t.Cleanup(func() { s.eng.Close() })
	mux := http.NewServeMux()
	chargesAPI(s.server, mux)
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		s.started <- struct{}{}
		<-s.release
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":"card declined"}`)
	})
	mux.HandleFunc("POST /unknown", func(w http.ResponseWriter, r *http.Request) {
		idemhttp.ReportOutcomeUnknown(w)
		w.WriteHeader(http.StatusBadGateway)
	})
	mux.HandleFunc("POST /big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", 1000))
	})
	mux.HandleFunc("POST /app/save", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"saved":true}`)
	})
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"ch_1"}`)
	})
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	var err error
	s.routes, err = idemhttp.Compile(s.eng, idemhttp.Options{
		Logger: quiet, MaxResponseBytes: 256, Tenant: idemhttp.TenantNone,
		Routes: []idemhttp.Route{
			{Pattern: "POST /charges"}, {Pattern: "POST /refunds"}, {Pattern: "POST /slow"}, {Pattern: "POST /unknown"}, {Pattern: "POST /big"},
			{Pattern: "POST /fail", Profile: idemhttp.WorkflowAdmin()},
			{Pattern: "POST /app/save", Profile: idemhttp.Mobile()},
			{Pattern: "POST /v1/charges", Profile: idemhttp.Stripe()}, {Pattern: "POST /flaky"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.url = newTestServer(t, s.routes.Wrap(mux))
	t.Cleanup(s.endSlow) // before the server closes: a failed test leaves no handler waiting
	return s
}

func (s *expiryServer) endSlow() { s.once.Do(func() { close(s.release) }) }

// expires reads the key's record and returns its expiry.
func (s *expiryServer) expires(method, path, key string) time.Time {
	s.t.Helper()
	scope, ok := s.routes.Scope(method, path, "")
	if !ok {
		s.t.Fatalf("no route for %s %s", method, path)
	}
	rec, err := s.eng.Lookup(context.Background(), scope, key)
	if err != nil {
		s.t.Fatalf("lookup %s: %v", key, err)
	}
	return rec.ExpiresAt
}

// firstAndReplayTellExpiry checks that a first answer and its replay both
// tell the key's expiry: the same second, or the replay's one later (the
// first answer tells the moment before its record was written, the replay
// the record's own expiry).
func firstAndReplayTellExpiry(t *testing.T, first, again *response) {
	t.Helper()
	f, err1 := http.ParseTime(first.Header.Get(idemhttp.ExpiresHeader))
	a, err2 := http.ParseTime(again.Header.Get(idemhttp.ExpiresHeader))
	if err1 != nil || err2 != nil || a.Before(f) || a.Sub(f) > time.Second {
		t.Fatalf("%s: first answer %q, replay %q", idemhttp.ExpiresHeader, first.Header.Get(idemhttp.ExpiresHeader), again.Header.Get(idemhttp.ExpiresHeader))
	}
}

// saysExpiry checks that r tells the expiry want in its header and, for a
// problem, in the body member (member "" for none).
func saysExpiry(t *testing.T, r *response, want time.Time, member string) {
	t.Helper()
	if got := r.Header.Get(idemhttp.ExpiresHeader); got != want.UTC().Format(http.TimeFormat) {
		t.Fatalf("%s %q, want %q (status %d %s)", idemhttp.ExpiresHeader, got, want.UTC().Format(http.TimeFormat), r.Status, r.Body)
	}
	if _, err := http.ParseTime(r.Header.Get(idemhttp.ExpiresHeader)); err != nil {
		t.Fatalf("not an HTTP-date: %v", err)
	}
	if member == "" {
		return
	}
	var got any = r.json(t)
	for _, name := range strings.Split(member, ".") {
		got = got.(map[string]any)[name]
	}
	if got != want.UTC().Format(time.RFC3339) {
		t.Fatalf("%s = %v, want %s", member, got, want.UTC().Format(time.RFC3339))
	}
	if _, err := time.Parse(time.RFC3339, got.(string)); err != nil || !strings.HasSuffix(got.(string), "Z") {
		t.Fatalf("%s = %v: not RFC 3339 in UTC", member, got)
	}
}

// Every answer about a record idem keeps tells the record's expiry: the
// first answer (in every profile), replays, and conflicts.
func TestExpiryToldOnReplaysAndConflicts(t *testing.T) {
	t.Parallel()
	s := newExpiryServer(t)
	// Each record is made at a time of its own, and each answer comes an
	// hour later: the expiry told is the record's, never now plus the TTL.
	later := func() { s.clock.Add(time.Hour) }

	t.Run("replay", func(t *testing.T) {
		first := s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "exp-replay")
		if first.Status != 201 {
			t.Fatalf("first execution: %d %s", first.Status, first.Body)
		}
		exp := s.expires("POST", "/charges", "exp-replay")
		if !exp.Equal(s.clock.Now().Add(24 * time.Hour)) {
			t.Fatalf("record expires %v, want a day after %v", exp, s.clock.Now())
		}
		saysExpiry(t, first, exp, "")
		later()
		r := s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "exp-replay")
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("not a replay: %d %v", r.Status, r.Header)
		}
		saysExpiry(t, r, exp, "")

		later()
		r = s.do("POST", "/charges", `{"amount":2}`, "Idempotency-Key", "exp-replay")
		problem(t, r, 422, idemhttp.KindPayloadMismatch)
		saysExpiry(t, r, exp, "key_expires_at")

		r = s.do("POST", "/refunds", `{"amount":1}`, "Idempotency-Key", "exp-replay")
		problem(t, r, 422, idemhttp.KindKeyReused)
		saysExpiry(t, r, exp, "key_expires_at")
	})

	t.Run("in_progress", func(t *testing.T) {
		later()
		done := make(chan *response, 1)
		go func() { done <- s.do("POST", "/slow", "", "Idempotency-Key", "exp-slow") }()
		<-s.started
		exp := s.expires("POST", "/slow", "exp-slow")
		s.clock.Add(10 * time.Second) // within the holder's lease
		r := s.do("POST", "/slow", "", "Idempotency-Key", "exp-slow")
		problem(t, r, 409, idemhttp.KindInProgress)
		saysExpiry(t, r, exp, "key_expires_at")
		s.endSlow()
		if first := <-done; first.Status != 201 {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
	})

	t.Run("previous_failure", func(t *testing.T) {
		later()
		first := s.do("POST", "/fail", `{}`, "Idempotency-Key", "exp-fail")
		if first.Status != 422 {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		exp := s.expires("POST", "/fail", "exp-fail")
		saysExpiry(t, first, exp, "") // workflow-admin records the failure
		later()
		r := s.do("POST", "/fail", `{}`, "Idempotency-Key", "exp-fail")
		problem(t, r, 409, idemhttp.KindPreviousFailure)
		saysExpiry(t, r, exp, "key_expires_at")
	})

	t.Run("outcome_unknown", func(t *testing.T) {
		later()
		first := s.do("POST", "/unknown", `{}`, "Idempotency-Key", "exp-unknown")
		exp := s.expires("POST", "/unknown", "exp-unknown")
		saysExpiry(t, first, exp, "")
		later()
		r := s.do("POST", "/unknown", `{}`, "Idempotency-Key", "exp-unknown")
		problem(t, r, 409, idemhttp.KindOutcomeUnknown)
		saysExpiry(t, r, exp, "key_expires_at")
	})

	t.Run("response_not_stored", func(t *testing.T) {
		later()
		// The one first answer without the expiry: it streamed out before
		// its outcome was recorded, so its headers were gone by then.
		if r := s.do("POST", "/big", `{}`, "Idempotency-Key", "exp-big"); r.Status != 200 || len(r.Body) != 1000 || r.Header.Get(idemhttp.ExpiresHeader) != "" {
			t.Fatalf("first: %d, %d bytes, %s %q", r.Status, len(r.Body), idemhttp.ExpiresHeader, r.Header.Get(idemhttp.ExpiresHeader))
		}
		exp := s.expires("POST", "/big", "exp-big")
		later()
		r := s.do("POST", "/big", `{}`, "Idempotency-Key", "exp-big")
		problem(t, r, 409, idemhttp.KindResponseNotStored)
		saysExpiry(t, r, exp, "key_expires_at")
	})

	t.Run("envelope", func(t *testing.T) {
		later()
		first := s.do("POST", "/app/save", `{"a":1}`, "Idempotency-Key", "exp-app")
		if first.Status != 200 {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		exp := s.expires("POST", "/app/save", "exp-app")
		saysExpiry(t, first, exp, "")
		later()
		r := s.do("POST", "/app/save", `{"a":2}`, "Idempotency-Key", "exp-app")
		if r.Status != 409 || !strings.Contains(string(r.Body), "DUPLICATE_OPERATION") {
			t.Fatalf("mismatch in the app's shape: %d %s", r.Status, r.Body)
		}
		saysExpiry(t, r, exp, "error.details.keyExpiresAt")
	})

	t.Run("stripe", func(t *testing.T) {
		later()
		first := s.do("POST", "/v1/charges", `{"a":1}`, "Idempotency-Key", "exp-stripe")
		if first.Status != 200 {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		exp := s.expires("POST", "/v1/charges", "exp-stripe")
		saysExpiry(t, first, exp, "")
		later()
		saysExpiry(t, s.do("POST", "/v1/charges", `{"a":1}`, "Idempotency-Key", "exp-stripe"), exp, "")
	})

	t.Run("released", func(t *testing.T) {
		// A failure the profile releases keeps no record: its answer
		// tells no expiry, since a retry runs again.
		for range 2 {
			r := s.do("POST", "/flaky", `{}`, "Idempotency-Key", "exp-flaky")
			if r.Status != 500 || r.Header.Get(idemhttp.ExpiresHeader) != "" {
				t.Fatalf("released failure: %d, %s %q", r.Status, idemhttp.ExpiresHeader, r.Header.Get(idemhttp.ExpiresHeader))
			}
		}
	})

	t.Run("not about a record", func(t *testing.T) {
		r := s.do("POST", "/charges", `{}`, "Idempotency-Key", strings.Repeat("k", 300)) // past the 255 bytes allowed
		problem(t, r, 400, idemhttp.KindInvalidKey)
		if v := r.Header.Get(idemhttp.ExpiresHeader); v != "" || strings.Contains(string(r.Body), "key_expires_at") {
			t.Fatalf("an invalid key has no record, yet the answer tells an expiry: %q %s", v, r.Body)
		}
	})
}

// A record's expiry falls inside a second; both formats drop the fraction,
// so that neither tells a client the key is kept longer than it is.
func TestExpiryNeverLaterThanTheRecord(t *testing.T) {
	t.Parallel()
	s := newExpiryServer(t)
	s.clock.Set(testkit.Epoch.Add(999 * time.Millisecond))
	s.do("POST", "/charges", `{"amount":1}`, "Idempotency-Key", "exp-frac")
	exp := s.expires("POST", "/charges", "exp-frac")
	r := s.do("POST", "/charges", `{"amount":2}`, "Idempotency-Key", "exp-frac")
	problem(t, r, 422, idemhttp.KindPayloadMismatch)
	h, err := http.ParseTime(r.Header.Get(idemhttp.ExpiresHeader))
	if err != nil {
		t.Fatal(err)
	}
	m, err := time.Parse(time.RFC3339, r.json(t)["key_expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	for _, told := range []time.Time{h, m} {
		if told.After(exp) || exp.Sub(told) >= time.Second {
			t.Fatalf("told %v for a record expiring at %v", told, exp)
		}
	}
}
