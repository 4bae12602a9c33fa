package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/store/file"
)

// echo is an upstream that answers every request with a new number and
// the credentials it received, as an API that echoes its caller's session
// would: a response replayed to another caller shows the first caller's.
type echo struct {
	*httptest.Server
	mu   sync.Mutex
	runs int
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	e := &echo{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.runs++
		n := e.runs
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]any{"n": n, "path": r.URL.Path,
			"cookie": r.Header.Get("Cookie"), "authorization": r.Header.Get("Authorization"), "account": r.Header.Get("X-Account")})
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *echo) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs
}

// strictDefault is the default tenant with nothing set (the harness would
// otherwise opt into anonymous: shared).
const strictDefault = "# tenant: the default\n"

// TestCookieCallersNeverShare: two callers with different cookies and no
// Authorization, one key and body: the second runs for itself and never
// gets the first's response (which echoes the first's session).
func TestCookieCallersNeverShare(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	g := startGateway(t, up.URL, t.TempDir(), strictDefault)
	a := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-cookie", "Cookie", "session=alice")
	b := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-cookie", "Cookie", "session=bob")
	if a.Status != 201 || b.Status != 201 || strings.Contains(string(b.Body), "alice") || b.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("bob got %d %s (Idempotent-Replayed %q); alice had %s", b.Status, b.Body, b.Header.Get("Idempotent-Replayed"), a.Body)
	}
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-cookie", "Cookie", "session=alice"); string(r.Body) != string(a.Body) {
		t.Errorf("alice's retry: %d %s", r.Status, r.Body)
	}
	if n := up.count(); n != 2 {
		t.Errorf("%d executions, want 2", n)
	}
}

// TestNoCredentials: a keyed request without any credential gets 401
// problem+json by default and never reaches the upstream; with anonymous:
// shared, such requests share one scope, and the gateway says so at start.
func TestNoCredentials(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	g := startGateway(t, up.URL, t.TempDir(), strictDefault)
	r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-anon")
	if r.Status != 401 || r.problem(t)["type"] != "https://github.com/idem-dev/idem/blob/main/docs/problems.md#tenant_required" {
		t.Fatalf("no credentials: %d %s", r.Status, r.Body)
	}
	if up.count() != 0 {
		t.Fatal("the upstream ran for a keyed request without credentials")
	}
	if r := post(t, g.URL+"/charges", chargeBody); r.Status != 201 {
		t.Errorf("keyless without credentials: %d", r.Status)
	}

	s := startGateway(t, up.URL, t.TempDir(), "anonymous: shared\n")
	first := post(t, s.URL+"/charges", chargeBody, "Idempotency-Key", "k-anon")
	again := post(t, s.URL+"/charges", chargeBody, "Idempotency-Key", "k-anon")
	if first.Status != 201 || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("anonymous: shared: %d %s, then %s", first.Status, first.Body, again.Body)
	}
	if !strings.Contains(s.output(), "anonymous: shared") {
		t.Errorf("the start-up log does not say anonymous: shared\n%s", s.output())
	}
}

// TestListTenantMissingSource: a list tenant answers 401 to a keyed
// request missing any source, never a scope made of the others or the
// anonymous scope; an optional source may be missing.
func TestListTenantMissingSource(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	g := startGateway(t, up.URL, t.TempDir(), "tenant: [{authorization: hash}, {header: X-Account}]\n")
	for _, hdr := range [][]string{{}, {"Authorization", "Bearer sk_a"}, {"X-Account", "acct_1"}} {
		r := post(t, g.URL+"/charges", chargeBody, append([]string{"Idempotency-Key", "k-list"}, hdr...)...)
		if r.Status != 401 {
			t.Errorf("with only %v: %d %s", hdr, r.Status, r.Body)
		}
	}
	if n := up.count(); n != 0 {
		t.Errorf("%d executions without a whole tenant", n)
	}
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-list", "Authorization", "Bearer sk_a", "X-Account", "acct_1"); r.Status != 201 {
		t.Errorf("both sources: %d %s", r.Status, r.Body)
	}

	o := startGateway(t, up.URL, t.TempDir(), "tenant: [{authorization: hash}, {header: X-Account, optional: true}]\n")
	a := post(t, o.URL+"/charges", chargeBody, "Idempotency-Key", "k-opt", "Authorization", "Bearer sk_a")
	b := post(t, o.URL+"/charges", chargeBody, "Idempotency-Key", "k-opt", "Authorization", "Bearer sk_a", "X-Account", "acct_1")
	if a.Status != 201 || b.Status != 201 || string(a.Body) == string(b.Body) {
		t.Errorf("optional source: %d %s / %d %s", a.Status, a.Body, b.Status, b.Body)
	}
	if r := post(t, o.URL+"/charges", chargeBody, "Idempotency-Key", "k-opt", "X-Account", "acct_1"); r.Status != 401 {
		t.Errorf("only the optional source: %d %s", r.Status, r.Body)
	}
}

// TestCredentialsComparedExactly: a credential without a scheme is
// compared byte for byte (AbCdEf-TOKEN is not abcdef-token: the second is
// no replay); an auth scheme's name is case-insensitive (Bearer X is
// bearer X).
func TestCredentialsComparedExactly(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	g := startGateway(t, up.URL, t.TempDir(), strictDefault)
	a := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-case", "Authorization", "AbCdEf-TOKEN")
	b := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-case", "Authorization", "abcdef-token")
	if a.Status != 201 || b.Status != 201 || b.Header.Get("Idempotent-Replayed") == "true" || string(a.Body) == string(b.Body) {
		t.Errorf("abcdef-token got AbCdEf-TOKEN's: %d %s", b.Status, b.Body)
	}
	c := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-scheme", "Authorization", "Bearer X")
	d := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-scheme", "Authorization", "bearer X")
	if d.Header.Get("Idempotent-Replayed") != "true" || string(c.Body) != string(d.Body) {
		t.Errorf("bearer X is not Bearer X's caller: %d %s / %s", d.Status, d.Body, c.Body)
	}
	if n := up.count(); n != 3 {
		t.Errorf("%d executions, want 3", n)
	}
}

// TestFormerScopeStillReplays: a record written before the default read
// more than Authorization, for a caller that sent Authorization and a
// Cookie, is still replayed to that caller (idem.Call.FormerScopes), and
// to no other. The record is written by a gateway whose tenant is
// {authorization: hash}: exactly the scope the earlier default gave, in a
// directory made by the file store itself as an earlier version's gateway
// made it, without the mark that tells a store this version created (whose
// gateway reads no former scope, having none to find).
func TestFormerScopeStillReplays(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	dir := t.TempDir()
	earlier, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := earlier.Close(); err != nil {
		t.Fatal(err)
	}
	old := startGateway(t, up.URL, dir, "tenant: {authorization: hash}\n")
	first := post(t, old.URL+"/charges", chargeBody, "Idempotency-Key", "k-former", "Authorization", "Bearer sk_alice", "Cookie", "session=s1")
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	if err := old.stop(os.Interrupt, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, up.URL, dir, strictDefault)
	again := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-former", "Authorization", "Bearer sk_alice", "Cookie", "session=s1")
	if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("after the upgrade: %d %s (Idempotent-Replayed %q), want %s", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"), first.Body)
	}
	// Another caller with the same key: its own, never the former record.
	other := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "k-former", "Authorization", "Bearer sk_bob", "Cookie", "session=s1")
	if other.Status != 201 || strings.Contains(string(other.Body), "sk_alice") {
		t.Errorf("bob: %d %s", other.Status, other.Body)
	}
	if n := up.count(); n != 2 {
		t.Errorf("%d executions, want 2", n)
	}
}

// TestPathVariantsRefused: through the gateway, a keyed (or, on a route
// whose key is required, any) POST on a variant of a protected route's
// path gets 400 path_variant and never reaches the upstream, which many
// frameworks would route to the protected handler; the route itself, and
// a variant with a route of its own, are protected as ever.
func TestPathVariantsRefused(t *testing.T) {
	t.Parallel()
	up := startEcho(t)
	g := startGateway(t, up.URL, t.TempDir(), `routes:
  - match: "POST /charges"
    key: required
  - match: "POST /refunds"
  - match: "POST /refunds/{$}"
`)
	auth := []string{"Authorization", "Bearer sk_a"}
	for _, path := range []string{"/charges/", "/Charges", "/charges%2F", "/charges;x", "/Refunds"} {
		r := post(t, g.URL+path, chargeBody, append([]string{"Idempotency-Key", "k-variant"}, auth...)...)
		if r.Status != 400 || r.problem(t)["type"] != "https://github.com/idem-dev/idem/blob/main/docs/problems.md#path_variant" {
			t.Errorf("keyed %s: %d %s", path, r.Status, r.Body)
		}
	}
	if r := post(t, g.URL+"/Charges", chargeBody, auth...); r.Status != 400 {
		t.Errorf("key-less /Charges, whose route requires a key: %d %s", r.Status, r.Body)
	}
	if n := up.count(); n != 0 {
		t.Fatalf("the upstream ran %d times for variants", n)
	}
	a := post(t, g.URL+"/refunds/", chargeBody, append([]string{"Idempotency-Key", "k-slash"}, auth...)...)
	b := post(t, g.URL+"/refunds/", chargeBody, append([]string{"Idempotency-Key", "k-slash"}, auth...)...)
	if a.Status != 201 || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a variant with a route of its own: %d, then %d %q", a.Status, b.Status, b.Header.Get("Idempotent-Replayed"))
	}
	if r := post(t, g.URL+"/Refunds", chargeBody, auth...); r.Status != 201 {
		t.Errorf("key-less /Refunds, whose route's key is optional: %d %s", r.Status, r.Body)
	}
}
