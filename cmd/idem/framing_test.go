package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// echoUpstream answers each request with what it received of the caller
// (X-User-ID) and a count of its executions, over real TCP.
func echoUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"user":%q,"execution":%d}`, r.Header.Get("X-User-ID"), i)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestScopeAndKeyFramedThroughGateway: with tenants from X-User-ID, user
// "alice" sending key "x:y" and user "alice:x" sending key "y" with the same
// body are two callers with two keys, with a secret and without: the second
// runs its own request and never receives alice's response (they shared a
// record when scope and key were joined by ':' before hashing).
func TestScopeAndKeyFramedThroughGateway(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"", gwSecretNew} {
		name := "plain"
		if secret != "" {
			name = "sealed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up, executions := echoUpstream(t)
			var env []string
			if secret != "" {
				env = []string{"IDEM_SECRET=" + secret}
			}
			g := startGatewayEnv(t, env, up.URL, t.TempDir(), "tenant: { header: X-User-ID }\n")
			body := `{"amount":100}`
			first := post(t, g.URL+"/charges", body, "X-User-ID", "alice", "Idempotency-Key", "x:y")
			second := post(t, g.URL+"/charges", body, "X-User-ID", "alice:x", "Idempotency-Key", "y")
			if first.Status != 201 || second.Status != 201 {
				t.Fatalf("statuses %d, %d: %s / %s", first.Status, second.Status, first.Body, second.Body)
			}
			if got := second.Header.Get("Idempotent-Replayed"); got != "false" || string(second.Body) != `{"user":"alice:x","execution":2}` {
				t.Fatalf("user alice:x with key y: Idempotent-Replayed %q, body %s: given alice's answer", got, second.Body)
			}
			again := post(t, g.URL+"/charges", body, "X-User-ID", "alice", "Idempotency-Key", "x:y")
			if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
				t.Fatalf("alice's retry: %q %s", again.Header.Get("Idempotent-Replayed"), again.Body)
			}
			// Another pair that joins to one string, the second with
			// another body: its own first call, not a 422 telling it
			// that alice's key exists.
			post(t, g.URL+"/charges", body, "X-User-ID", "alice", "Idempotency-Key", "p:q")
			if other := post(t, g.URL+"/charges", `{"amount":999}`, "X-User-ID", "alice:p", "Idempotency-Key", "q"); other.Status != 201 || other.Header.Get("Idempotent-Replayed") != "false" {
				t.Fatalf("user alice:p with key q and another body: %d %s", other.Status, other.Body)
			}
			if n := executions.Load(); n != 4 {
				t.Fatalf("%d executions upstream, want 4", n)
			}
		})
	}
}
