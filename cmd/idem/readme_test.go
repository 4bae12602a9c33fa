package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeExample: the README's YAML, used verbatim (only the addresses
// and the upstream come from flags), protects POST /charges: a retry is
// replayed and the charge runs once. The start-up log says which routes
// are protected.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("no yaml block in the README")
	}
	a := startAPI(t)
	g := startGateway(t, a.URL, "", string(m[1]))
	// The README's default tenant: callers are told apart by their
	// credentials, and a keyed request without any gets 401.
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "readme-1"); r.Status != 401 {
		t.Errorf("POST /charges without credentials: %d %s", r.Status, r.Body)
	}
	first := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "readme-1", "Authorization", "Bearer sk_readme")
	again := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "readme-1", "Authorization", "Bearer sk_readme")
	if first.Status != 201 || again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || string(first.Body) != string(again.Body) {
		t.Errorf("POST /charges twice: %d %d %v", first.Status, again.Status, again.Header)
	}
	if n := a.stats(t).Executions["readme-1"]; n != 1 {
		t.Errorf("the charge ran %d times", n)
	}
	if !strings.Contains(g.output(), `"msg":"idem: protecting only the listed routes; every other request passes through unprotected, key or not","routes":"POST /charges; POST /refunds; `) {
		t.Errorf("start-up log:\n%s", g.output())
	}
}
