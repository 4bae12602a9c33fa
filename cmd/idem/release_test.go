package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestReleaseByRequest: an operator frees a key whose outcome is unknown
// by what they know of it, the request as the client sent it (method,
// path, the caller's X-User-ID, the key), through `idem release`, without
// rebuilding its scope; the next request with the key runs again, and no
// other caller's key is touched.
func TestReleaseByRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-User-ID") + "/" + r.Header.Get("Idempotency-Key")
		mu.Lock()
		ran[id]++
		n := ran[id]
		mu.Unlock()
		if n == 1 {
			// The answer never comes back whole: the outcome is unknown.
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	const token = "an-admin-token-for-the-test"
	yaml := "admin_token: " + token + "\ntenant: { header: X-User-ID }\nroutes:\n  - match: \"POST /orders\"\n"
	g := startGateway(t, up.URL, t.TempDir(), yaml)
	order := func(user, key string) response {
		return post(t, g.URL+"/orders", `{"item":1}`, "X-User-ID", user, "Idempotency-Key", key)
	}
	for _, user := range []string{"alice", "bob"} {
		order(user, "order-1") // cut
		if r := order(user, "order-1"); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "outcome_unknown") {
			t.Fatalf("%s's retry after the cut: %d %s", user, r.Status, r.Body)
		}
	}
	out, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token,
		"--path", "/orders", "--header", "X-User-ID: alice", "--key", "order-1")
	if err != nil || !strings.Contains(out, `released key "order-1" (POST /orders)`) {
		t.Fatalf("idem release --path --header: %v %q %q", err, out, errOut)
	}
	if r := order("alice", "order-1"); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("alice after the release: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r := order("bob", "order-1"); r.Status != http.StatusConflict {
		t.Fatalf("bob's key was released with alice's: %d %s", r.Status, r.Body)
	}
	// The tenant as its source gives it works the same.
	if out, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token,
		"--path", "/orders", "--tenant", "bob", "--key", "order-1"); err != nil {
		t.Fatalf("idem release --tenant: %v %q %q", err, out, errOut)
	}
	if r := order("bob", "order-1"); r.Status != http.StatusCreated {
		t.Fatalf("bob after the release: %d %s", r.Status, r.Body)
	}
	if _, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token,
		"--path", "/refunds", "--header", "X-User-ID: alice", "--key", "order-1"); err == nil || !strings.Contains(errOut, "no route covers") {
		t.Fatalf("a path no route covers: %v %q", err, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["alice/order-1"] != 2 || ran["bob/order-1"] != 2 {
		t.Fatalf("executions %v, want 2 each", ran)
	}
}
