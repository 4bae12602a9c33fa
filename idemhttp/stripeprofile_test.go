package idemhttp_test

// The payments API's validation requests (its decision record on
// idempotency keys), replayed against the stripe profile.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
)

// validationAPI is the API's only mutating endpoint, which launches a
// validation run.
func validationAPI(block <-chan struct{}) func(s *server, mux *http.ServeMux) {
	return func(s *server, mux *http.ServeMux) {
		var mu sync.Mutex
		runs := 0
		mux.HandleFunc("POST /api/workflows/{id}/start/", s.counting(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("block") != "" && block != nil {
				<-block
			}
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			runs++
			run := runs
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			status := http.StatusCreated
			if r.URL.Query().Get("fail") != "" {
				status = http.StatusInternalServerError
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"run_id":"run_%d","workflow":%q,"org":%q,"input":%s}`, run, r.PathValue("id"), r.Header.Get("X-Organization-ID"), orNull(body))
		}))
		mux.HandleFunc("POST /api/workflows/{id}/other/", s.counting(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"other":true}`)
		}))
	}
}

func stripeServer(t *testing.T, block <-chan struct{}, ttl time.Duration) *server {
	p := idemhttp.Stripe()
	// IDEMPOTENCY_KEY_TTL_HOURS: the TTL comes from configuration.
	p.Policy.TTL = ttl
	return newServer(t, idemhttp.Options{Profile: p, Tenant: idemhttp.TenantHeader("X-Organization-ID")}, validationAPI(block))
}

const startPath = "/api/workflows/wf-7/start/"

func TestStripeProfileReplayHeaders(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	key := uuid.NewString()
	first := s.do("POST", startPath, `{"files":["a.idf"]}`, "Idempotency-Key", key, "X-Organization-ID", "org-1", "X-Request-Id", "req-1")
	again := s.do("POST", startPath, `{"files":["a.idf"]}`, "Idempotency-Key", key, "X-Organization-ID", "org-1", "X-Request-Id", "req-2")
	sameResponse(t, first, again)
	firstAndReplayTellExpiry(t, first, again)
	if again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Original-Request-Id") != "req-1" {
		t.Fatalf("replay headers %v", again.Header)
	}
	if n := s.count("POST", startPath, key); n != 1 {
		t.Fatalf("%d runs launched, want 1", n)
	}
}

func TestStripeProfileScopeOrganizationAndEndpoint(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	key := uuid.NewString()
	a := s.do("POST", startPath, `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	b := s.do("POST", startPath, `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-2")
	if string(a.Body) == string(b.Body) || b.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatal("duplicate keys across orgs must be allowed, separately")
	}
	// Another endpoint is another scope: the key is free there.
	c := s.do("POST", "/api/workflows/wf-7/other/", `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	if c.Status != 200 || c.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("other endpoint: %d %v", c.Status, c.Header)
	}
}

func TestStripeProfileKeysAreOptional(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	s.do("POST", startPath, `{}`, "X-Organization-ID", "org-1")
	s.do("POST", startPath, `{}`, "X-Organization-ID", "org-1")
	if n := s.count("POST", startPath, ""); n != 2 {
		t.Fatalf("without a key, %d runs; the ADR accepts duplicates", n)
	}
}

func TestStripeProfileInFlightConflictWithoutWaiting(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	// The request's span says whether it waited for the key's holder.
	rec := tracetest.NewSpanRecorder()
	p := idemhttp.Stripe()
	s := newServer(t, idemhttp.Options{Profile: p, Tenant: idemhttp.TenantHeader("X-Organization-ID"),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}, validationAPI(block))
	key := uuid.NewString()
	done := make(chan *response)
	go func() {
		done <- s.do("POST", startPath+"?block=1", `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	}()
	// Wait until the first request holds the key.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.store.Get(context.Background(), "org-1|POST "+startPath, storeHash("org-1|POST "+startPath, key)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never reserved the key")
		}
		time.Sleep(time.Millisecond)
	}
	r := s.do("POST", startPath+"?block=1", `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	problem(t, r, 409, idemhttp.KindInProgress)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended while the first request runs, want the duplicate's", len(spans))
	}
	if a := attrs(spans[0]); a["idem.outcome"] != string(idemhttp.KindInProgress) || a["idem.waited"] != "false" {
		t.Fatalf("the in-flight duplicate's span: %v, want an in_progress conflict that did not wait", a)
	}
	close(block)
	if first := <-done; first.Status != 201 {
		t.Fatalf("first: %d", first.Status)
	}
}

func TestStripeProfileHashGuard(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	key := uuid.NewString()
	s.do("POST", startPath, `{"files":["a.idf"]}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	problem(t, s.do("POST", startPath, `{"files":["b.idf"]}`, "Idempotency-Key", key, "X-Organization-ID", "org-1"), 422, idemhttp.KindPayloadMismatch)
}

func TestStripeProfileKeyLength(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	if r := s.do("POST", startPath, `{}`, "Idempotency-Key", strings.Repeat("a", 255), "X-Organization-ID", "org-1"); r.Status != 201 {
		t.Fatalf("255 chars: %d", r.Status)
	}
	problem(t, s.do("POST", startPath, `{}`, "Idempotency-Key", strings.Repeat("a", 256), "X-Organization-ID", "org-1"), 400, idemhttp.KindInvalidKey)
}

// TTL & cleanup: keys expire after the configured hours; the cleanup command
// (engine.Cleanup, run by `idem cleanup`) removes them.
func TestStripeProfileTTLAndCleanup(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 48*time.Hour) // IDEMPOTENCY_KEY_TTL_HOURS=48
	key := uuid.NewString()
	s.do("POST", startPath, `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	s.clock.Add(47 * time.Hour)
	if r := s.do("POST", startPath, `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("expired before its TTL")
	}
	s.clock.Add(2 * time.Hour)
	if s.store.Len() != 1 {
		t.Fatalf("%d records", s.store.Len())
	}
	eng := idem.New(s.store, idem.Policy{CleanupInterval: -1}, idem.WithClock(s.clock.Now))
	n, err := eng.Cleanup(context.Background(), 100, nil)
	if err != nil || n != 1 || s.store.Len() != 0 {
		t.Fatalf("cleanup removed %d (%v), %d left", n, err, s.store.Len())
	}
	if r := s.do("POST", startPath, `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1"); r.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatal("an expired key was replayed")
	}
}

// Like Stripe, the profile keeps what the endpoint answered once it ran,
// even a 500.
func TestStripeProfileServerErrorIsKept(t *testing.T) {
	t.Parallel()
	s := stripeServer(t, nil, 24*time.Hour)
	key := uuid.NewString()
	a := s.do("POST", startPath+"?fail=1", `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	b := s.do("POST", startPath+"?fail=1", `{}`, "Idempotency-Key", key, "X-Organization-ID", "org-1")
	sameResponse(t, a, b)
	if a.Status != 500 || s.count("POST", startPath, key) != 1 {
		t.Fatalf("%d, ran %d", a.Status, s.count("POST", startPath, key))
	}
}
