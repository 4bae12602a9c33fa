package routers_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/examples/routers"
	"github.com/idem-dev/idem/store/memory"
)

// TestRoutersUnderPrefix: under each router, POST /api/orders with a key
// runs once and its retry is replayed, another caller's same key runs on
// its own, and a request without a key gets 400 (the route requires one):
// the route written as the sub-router sees it protects the prefixed path.
func TestRoutersUnderPrefix(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func(*idem.Engine, http.Handler) http.Handler{
		"chi Route": routers.ChiRoute, "chi Mount": routers.ChiMount, "echo Group": routers.EchoGroup,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
			defer eng.Close()
			var runs atomic.Int64
			srv := httptest.NewServer(build(eng, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			})))
			defer srv.Close()
			post := func(user, key string) *http.Response {
				req, _ := http.NewRequest("POST", srv.URL+"/api/orders", strings.NewReader(`{"item":1}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-User-ID", user)
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res
			}
			for i, want := range []string{"false", "true"} {
				if res := post("alice", "order-1"); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != want {
					t.Fatalf("alice's call %d: %d %v", i+1, res.StatusCode, res.Header)
				}
			}
			if res := post("bob", "order-1"); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "false" {
				t.Fatalf("bob's call: %d %v", res.StatusCode, res.Header)
			}
			if res := post("alice", ""); res.StatusCode != http.StatusBadRequest {
				t.Fatalf("a request without a key: %d, want 400", res.StatusCode)
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("the handler ran %d times, want 2", n)
			}
		})
	}
}
