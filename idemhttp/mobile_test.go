package idemhttp_test

// The mobile app's offline and retry readiness: its three test cases, its
// caching table, its endpoint table and its limits, replayed against the
// mobile profile.

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idem-dev/idem/idemhttp"
)

// funnelsAPI is the mobile app's API: the four write endpoints of its table.
func funnelsAPI(s *server, mux *http.ServeMux) {
	var ids atomic.Int32
	answer := func(ok int) http.HandlerFunc {
		return s.counting(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			status := ok
			if q := r.URL.Query().Get("status"); q != "" {
				fmt.Sscan(q, &status)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"success":%t,"data":{"id":"%d","received":%s}}`, status < 300, ids.Add(1), orNull(body))
		})
	}
	mux.HandleFunc("POST /api/funnels/{slug}/assessments", answer(201))
	mux.HandleFunc("POST /api/funnels/{slug}/assessments/{id}/answers/save", answer(200))
	mux.HandleFunc("POST /api/funnels/{slug}/assessments/{id}/steps/{stepId}/validate", answer(200))
	mux.HandleFunc("POST /api/funnels/{slug}/assessments/{id}/complete", answer(200))
}

func orNull(b []byte) string {
	if len(b) == 0 {
		return "null"
	}
	return string(b)
}

// mobileServer is the app's endpoint table: payload check on answers/save only.
func mobileServer(t *testing.T) *server {
	return newServer(t, idemhttp.Options{
		Profile: idemhttp.Mobile(),
		Tenant:  idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{
			{Pattern: "POST /api/funnels/{slug}/assessments", Fingerprint: idemhttp.FingerprintNone},
			{Pattern: "POST /api/funnels/{slug}/assessments/{id}/answers/save", Fingerprint: idemhttp.FingerprintBody},
			{Pattern: "POST /api/funnels/{slug}/assessments/{id}/steps/{stepId}/validate", Fingerprint: idemhttp.FingerprintNone},
			{Pattern: "POST /api/funnels/{slug}/assessments/{id}/complete", Fingerprint: idemhttp.FingerprintNone},
		},
	}, funnelsAPI)
}

const (
	user       = "6f1c7d1e-3b7a-4d2e-9f51-0c4f8a1b2c3d"
	saveAnswer = "/api/funnels/stress/assessments/a1/answers/save"
)

func (s *server) saveAnswer(stepID, questionID string, value int, key string) *response {
	return s.do("POST", saveAnswer,
		fmt.Sprintf(`{"stepId":%q,"questionId":%q,"answerValue":%d}`, stepID, questionID, value),
		"Idempotency-Key", key, "X-User-ID", user)
}

// Test Case 1: Duplicate Request Returns Same Response.
func TestMobileDuplicateRequestReturnsSameResponse(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	key := uuid.NewString()
	response1 := s.saveAnswer("s1", "q1", 3, key)
	response2 := s.saveAnswer("s1", "q1", 3, key)
	sameResponse(t, response1, response2)
	firstAndReplayTellExpiry(t, response1, response2)
	if response2.Header.Get("X-Idempotency-Cached") != "true" {
		t.Fatalf("X-Idempotency-Cached %q, want true", response2.Header.Get("X-Idempotency-Cached"))
	}
	if response1.Header.Get("X-Idempotency-Cached") != "" {
		t.Fatal("the first response claims to be cached")
	}
	if n := s.count("POST", saveAnswer, key); n != 1 {
		t.Fatalf("executed %d times", n)
	}
}

// Test Case 2: Conflict Detection.
func TestMobileConflictDetection(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	key := uuid.NewString()
	s.saveAnswer("s1", "q1", 1, key)
	response := s.saveAnswer("s1", "q1", 2, key)
	if response.Status != 409 {
		t.Fatalf("status %d, want 409", response.Status)
	}
	body := response.json(t)
	e := body["error"].(map[string]any)
	details := e["details"].(map[string]any)
	if body["success"] != false || e["code"] != "DUPLICATE_OPERATION" ||
		e["message"] != "Idempotency-Key wurde bereits mit unterschiedlichen Daten verwendet." ||
		details["idempotencyKey"] != key || details["conflictType"] != "payload_mismatch" {
		t.Fatalf("error body %s", response.Body)
	}
}

// Test Case 3: Different Keys Create Different Records.
func TestMobileDifferentKeysCreateDifferentRecords(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	response1 := s.saveAnswer("s1", "q1", 3, uuid.NewString())
	response2 := s.saveAnswer("s1", "q1", 3, uuid.NewString())
	id1 := response1.json(t)["data"].(map[string]any)["id"]
	id2 := response2.json(t)["data"].(map[string]any)["id"]
	if id1 == id2 {
		t.Fatalf("both records have id %v", id1)
	}
}

// The caching policy table: 2xx and 409 cached; other 4xx and 5xx not.
func TestMobileCachingPolicy(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	for _, c := range []struct {
		status int
		cached bool
	}{{200, true}, {201, true}, {204, true}, {409, true}, {400, false}, {401, false}, {403, false}, {404, false}, {422, false}, {500, false}, {503, false}} {
		key := uuid.NewString()
		path := fmt.Sprintf("/api/funnels/stress/assessments/a1/complete?status=%d", c.status)
		r1 := s.do("POST", path, `{}`, "Idempotency-Key", key, "X-User-ID", user)
		r2 := s.do("POST", path, `{}`, "Idempotency-Key", key, "X-User-ID", user)
		if r1.Status != c.status || r2.Status != c.status {
			t.Fatalf("%d: got %d then %d", c.status, r1.Status, r2.Status)
		}
		n := s.count("POST", "/api/funnels/stress/assessments/a1/complete", key)
		if c.cached && (n != 1 || r2.Header.Get("X-Idempotency-Cached") != "true") {
			t.Errorf("%d should be cached: ran %d times", c.status, n)
		}
		if !c.cached && (n != 2 || r2.Header.Get("X-Idempotency-Cached") != "") {
			t.Errorf("%d should not be cached: ran %d times", c.status, n)
		}
	}
	// "Temporary validation errors (400) can be fixed by sending the same
	// request again after correcting the payload": the key is free again.
	key := uuid.NewString()
	s.do("POST", saveAnswer+"?status=400", `{"answerValue":-1}`, "Idempotency-Key", key, "X-User-ID", user)
	if r := s.do("POST", saveAnswer, `{"answerValue":3}`, "Idempotency-Key", key, "X-User-ID", user); r.Status != 200 {
		t.Fatalf("corrected request after a 400: %d %s", r.Status, r.Body)
	}
}

// The endpoint table: payload check on answers/save only; "Payload Check
// Only on Some Endpoints" (limitation 3).
func TestMobilePayloadCheckPerEndpoint(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	for _, path := range []string{
		"/api/funnels/stress/assessments",
		"/api/funnels/stress/assessments/a1/steps/st1/validate",
		"/api/funnels/stress/assessments/a1/complete",
	} {
		key := uuid.NewString()
		r1 := s.do("POST", path, `{"v":1}`, "Idempotency-Key", key, "X-User-ID", user)
		r2 := s.do("POST", path, `{"v":2}`, "Idempotency-Key", key, "X-User-ID", user)
		sameResponse(t, r1, r2) // no payload check: the first outcome
		if n := s.count("POST", path, key); n != 1 {
			t.Fatalf("%s ran %d times", path, n)
		}
	}
}

// "Scope Keys Per User" and "No Cross-Endpoint Keys".
func TestMobileScopes(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	key := uuid.NewString()
	a := s.do("POST", saveAnswer, `{"answerValue":1}`, "Idempotency-Key", key, "X-User-ID", user)
	b := s.do("POST", saveAnswer, `{"answerValue":1}`, "Idempotency-Key", key, "X-User-ID", "another-user")
	c := s.do("POST", "/api/funnels/stress/assessments/a1/complete", `{}`, "Idempotency-Key", key, "X-User-ID", user)
	if b.Header.Get("X-Idempotency-Cached") != "" || c.Header.Get("X-Idempotency-Cached") != "" || string(a.Body) == string(b.Body) {
		t.Fatal("a key was shared across users or endpoints")
	}
	if s.total() != 3 {
		t.Fatalf("%d executions, want 3", s.total())
	}
	// Without the user, no shared anonymous scope.
	r := s.do("POST", saveAnswer, `{"answerValue":1}`, "Idempotency-Key", key)
	if r.Status != 401 || r.json(t)["error"].(map[string]any)["code"] != "UNAUTHORIZED" {
		t.Fatalf("no user: %d %s", r.Status, r.Body)
	}
}

// "24 Hour Window: Keys expire after 24 hours".
func TestMobileExpiry(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	key := uuid.NewString()
	s.saveAnswer("s1", "q1", 3, key)
	s.clock.Add(23 * time.Hour)
	if r := s.saveAnswer("s1", "q1", 3, key); r.Header.Get("X-Idempotency-Cached") != "true" {
		t.Fatal("not cached after 23 h")
	}
	s.clock.Add(2 * time.Hour)
	if r := s.saveAnswer("s1", "q1", 3, key); r.Header.Get("X-Idempotency-Cached") != "" {
		t.Fatal("still cached after 25 h")
	}
	if n := s.count("POST", saveAnswer, key); n != 2 {
		t.Fatalf("executed %d times, want 2", n)
	}
}

// A request without a key is processed normally.
func TestMobileNoKey(t *testing.T) {
	t.Parallel()
	s := mobileServer(t)
	s.do("POST", saveAnswer, `{}`, "X-User-ID", user)
	s.do("POST", saveAnswer, `{}`, "X-User-ID", user)
	if n := s.count("POST", saveAnswer, ""); n != 2 {
		t.Fatalf("ran %d times", n)
	}
}
