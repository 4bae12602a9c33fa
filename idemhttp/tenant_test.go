package idemhttp_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest"
)

// echoAPI answers every request with a new number and the credentials it
// received, as an API that echoes its caller's session would: a response
// replayed to another caller shows the first caller's.
func echoAPI(n *atomic.Int32) func(s *server, mux *http.ServeMux) {
	return func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("/", s.counting(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"n":%d,"cookie":%q,"authorization":%q,"api_key":%q}`,
				n.Add(1), r.Header.Get("Cookie"), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
		}))
	}
}

// TestDefaultTenantReadsEveryCredential: with the default tenant, callers
// are told apart by every credential they carry, compared exactly but for
// the case of an Authorization scheme, and a keyed request carrying none
// gets 401 tenant_required.
func TestDefaultTenantReadsEveryCredential(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	s := newStrictServer(t, idemhttp.Options{}, echoAPI(&n))
	post := func(key string, h ...string) *response {
		return s.do("POST", "/charges", `{"amount":1}`, append([]string{"Idempotency-Key", key}, h...)...)
	}
	ran := func(a, b *response) bool {
		return a.Status == 201 && b.Status == 201 && string(a.Body) != string(b.Body)
	}

	// Two cookie-authenticated callers, no Authorization: each its own.
	a := post("k1", "Cookie", "session=alice")
	b := post("k1", "Cookie", "session=bob")
	if !ran(a, b) || strings.Contains(string(b.Body), "alice") {
		t.Fatalf("the second cookie caller got %d %s (the first got %s)", b.Status, b.Body, a.Body)
	}
	sameResponse(t, a, post("k1", "Cookie", "session=alice"))

	// No credential at all: 401, nothing runs.
	before := n.Load()
	p := problem(t, post("k1"), 401, idemhttp.KindTenantRequired)
	if !strings.Contains(p["detail"].(string), "credentials") || n.Load() != before {
		t.Errorf("401 detail %q, %d runs", p["detail"], n.Load()-before)
	}

	// A credential without a scheme is compared byte for byte.
	c := post("k2", "Authorization", "AbCdEf-TOKEN")
	d := post("k2", "Authorization", "abcdef-token")
	if !ran(c, d) {
		t.Errorf("AbCdEf-TOKEN and abcdef-token are one caller: %s / %s", c.Body, d.Body)
	}
	// Only the scheme's name is case-insensitive, white space after it folded.
	e := post("k3", "Authorization", "Bearer X")
	for _, auth := range []string{"bearer X", "BEARER   X", "Bearer\tX"} {
		sameResponse(t, e, post("k3", "Authorization", auth))
	}
	if f := post("k3", "Authorization", "Bearer x"); !ran(e, f) {
		t.Error("Bearer X and Bearer x are one caller")
	}
	// API-key headers and Authorization together make one caller.
	g := post("k4", "X-Api-Key", "key-1")
	h := post("k4", "X-Api-Key", "key-2")
	if !ran(g, h) {
		t.Error("two X-Api-Key callers share a key")
	}
	i := post("k5", "Authorization", "Bearer X", "Cookie", "session=alice")
	j := post("k5", "Authorization", "Bearer X", "Cookie", "session=bob")
	if !ran(i, j) {
		t.Error("one Authorization, two sessions: one caller")
	}
}

// TestSharedAnonymousScope: opted into, keyed requests without credentials
// share one scope; a Tenant of one's own with it is refused.
func TestSharedAnonymousScope(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	s := newStrictServer(t, idemhttp.Options{SharedAnonymousScope: true}, echoAPI(&n))
	a := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k")
	sameResponse(t, a, s.do("POST", "/charges", `{}`, "Idempotency-Key", "k"))
	if b := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "Cookie", "session=bob"); string(a.Body) == string(b.Body) {
		t.Error("a caller with credentials got the anonymous scope's response")
	}
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	t.Cleanup(func() { eng.Close() })
	if _, err := idemhttp.New(eng, idemhttp.Options{SharedAnonymousScope: true, Tenant: idemhttp.TenantHeader("X-User-ID")}); !errors.Is(err, idemhttp.ErrSharedAnonymousScope) {
		t.Errorf("SharedAnonymousScope with a Tenant: %v", err)
	}
}

// TestTenantFromSources: a request missing a required source gets 401,
// never a scope made of the others; an optional one may be missing; a
// cookie source reads that cookie alone.
func TestTenantFromSources(t *testing.T) {
	t.Parallel()
	if _, err := idemhttp.TenantFrom(idemhttp.TenantSource{Header: "Stripe-Account", Optional: true}); !errors.Is(err, idemhttp.ErrTenantSources) {
		t.Errorf("only optional sources: %v", err)
	}
	if _, err := idemhttp.TenantFrom(idemhttp.TenantSource{Header: "A", Cookie: "b"}); !errors.Is(err, idemhttp.ErrTenantSources) {
		t.Errorf("a header and a cookie in one source: %v", err)
	}
	var n atomic.Int32
	combo := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantFromHeaders("Authorization", "X-Account")}, echoAPI(&n))
	problem(t, combo.do("POST", "/c", `{}`, "Idempotency-Key", "k"), 401, idemhttp.KindTenantRequired)
	problem(t, combo.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a"), 401, idemhttp.KindTenantRequired)
	problem(t, combo.do("POST", "/c", `{}`, "Idempotency-Key", "k", "X-Account", "acct_1"), 401, idemhttp.KindTenantRequired)
	if n.Load() != 0 {
		t.Fatalf("%d runs without a tenant", n.Load())
	}

	tf, err := idemhttp.TenantFrom(idemhttp.TenantSource{Header: "Authorization"}, idemhttp.TenantSource{Header: "Stripe-Account", Optional: true})
	if err != nil {
		t.Fatal(err)
	}
	opt := newServer(t, idemhttp.Options{Tenant: tf}, echoAPI(&n))
	a := opt.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a")
	sameResponse(t, a, opt.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Authorization", "bearer a"))
	if b := opt.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a", "Stripe-Account", "acct_1"); string(a.Body) == string(b.Body) {
		t.Error("an optional source present or absent: one caller")
	}
	problem(t, opt.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Stripe-Account", "acct_1"), 401, idemhttp.KindTenantRequired)

	session, err := idemhttp.TenantFrom(idemhttp.TenantSource{Cookie: "session"})
	if err != nil {
		t.Fatal(err)
	}
	ck := newServer(t, idemhttp.Options{Tenant: session}, echoAPI(&n))
	c := ck.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Cookie", "_ga=1; session=alice")
	sameResponse(t, c, ck.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Cookie", "session=alice; _ga=2"))
	if d := ck.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Cookie", "session=bob; _ga=1"); string(c.Body) == string(d.Body) {
		t.Error("two sessions share a key")
	}
	problem(t, ck.do("POST", "/c", `{}`, "Idempotency-Key", "k", "Cookie", "_ga=1"), 401, idemhttp.KindTenantRequired)
}

// TestTenantHashesAreStable: the tenants of requests that carry only
// Authorization with a scheme are what they were before the default read
// every credential (and before lists required every source), so that the
// records written under them keep their scope. The values are those of
// the earlier release.
func TestTenantHashesAreStable(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer  sk_live_Alice")
	for name, f := range map[string]idemhttp.TenantFunc{"default": idemhttp.TenantCredentials, "Authorization": idemhttp.TenantFromHeaders("Authorization")} {
		if got, ok := f(r); !ok || got != "cred:bb41dbbd064be71b2d77a0cd78d3c9ef" {
			t.Errorf("%s: %q, %v", name, got, ok)
		}
	}
	r.Header.Add("Authorization", "Basic QWxhZGRpbjpvcGVu")
	if got, _ := idemhttp.TenantCredentials(r); got != "cred:dc0a67e6793b1e3d1bf0d9eb7bbf4b87" {
		t.Errorf("two Authorization values: %q", got)
	}
	r.Header.Set("Authorization", "bearer sk_test_alice")
	r.Header.Set("Stripe-Account", "acct_1")
	if got, _ := idemhttp.TenantFromHeaders("Authorization", "Stripe-Account")(r); got != "cred:f04fe80daf3fcdc2a16e299f4df07288" {
		t.Errorf("Authorization + Stripe-Account: %q", got)
	}
}

// TestClientCertificateIsACredential: the TLS client certificate alone
// identifies a caller, one per certificate.
func TestClientCertificateIsACredential(t *testing.T) {
	t.Parallel()
	state := func(raw string) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte(raw)}}}
	}
	a, okA := idemhttp.CredentialTenant(http.Header{}, state("cert-a"))
	b, okB := idemhttp.CredentialTenant(http.Header{}, state("cert-b"))
	if !okA || !okB || a == b || !strings.HasPrefix(a, "cred:") {
		t.Errorf("certificates: %q %v, %q %v", a, okA, b, okB)
	}
	if _, ok := idemhttp.CredentialTenant(http.Header{}, &tls.ConnectionState{}); ok {
		t.Error("a TLS connection without a client certificate is a credential")
	}
	withAuth, _ := idemhttp.CredentialTenant(http.Header{"Authorization": {"Bearer x"}}, state("cert-a"))
	auth, _ := idemhttp.CredentialTenant(http.Header{"Authorization": {"Bearer x"}}, nil)
	if withAuth == auth || withAuth == a {
		t.Error("the certificate and Authorization together are not their own caller")
	}
}

// formerDefault is the default tenant as the earlier release derived it: a
// hash of the Authorization values, the scheme lower-cased, a value
// without a scheme lower-cased whole; without Authorization, the anonymous
// scope.
func formerDefault(r *http.Request) (string, bool) {
	var b []byte
	for _, v := range r.Header.Values("Authorization") {
		v = strings.TrimSpace(v)
		if scheme, rest, ok := strings.Cut(v, " "); ok {
			v = strings.ToLower(scheme) + " " + strings.TrimSpace(rest)
		} else {
			v = strings.ToLower(v)
		}
		b = append(b, "Authorization:"+v+"\n"...)
	}
	if b == nil {
		return "", true
	}
	return "cred:" + idemhttp.HashCredential(b), true
}

// TestFormerScopes: records written by the earlier default tenant are
// still this caller's when that tenant identified it exactly (an
// Authorization with a scheme, here with a cookie the earlier default did
// not read): replayed. Never those of the anonymous scope or of a
// credential without a scheme, which earlier versions shared between
// callers: such a caller runs anew.
func TestFormerScopes(t *testing.T) {
	t.Parallel()
	eng := idem.New(storetest.Earlier(memory.New()), idem.Policy{CleanupInterval: -1})
	t.Cleanup(func() { eng.Close() })
	var n atomic.Int32
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"n":%d,"authorization":%q}`, n.Add(1), r.Header.Get("Authorization"))
	})
	before, err := idemhttp.New(eng, idemhttp.Options{Logger: quiet, Tenant: formerDefault})
	if err != nil {
		t.Fatal(err)
	}
	after, err := idemhttp.New(eng, idemhttp.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	send := func(mw func(http.Handler) http.Handler, key string, h ...string) (string, string) {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Add(h[i], h[i+1])
		}
		w := httptest.NewRecorder()
		mw(api).ServeHTTP(w, r)
		return w.Body.String(), w.Header().Get("Idempotent-Replayed")
	}
	first, _ := send(before, "k1", "Authorization", "Bearer sk_alice", "Cookie", "session=s1")
	if again, replayed := send(after, "k1", "Authorization", "bearer  sk_alice", "Cookie", "session=s1"); again != first || replayed != "true" {
		t.Errorf("after the upgrade: %s (replayed %q), want %s", again, replayed, first)
	}
	if other, _ := send(after, "k1", "Authorization", "Bearer sk_bob", "Cookie", "session=s1"); other == first {
		t.Error("another caller got the former record")
	}
	// Shared earlier: never read again.
	shared, _ := send(before, "k2", "Authorization", "AbCdEf-TOKEN")
	for _, auth := range []string{"AbCdEf-TOKEN", "abcdef-token"} {
		if got, replayed := send(after, "k2", "Authorization", auth, "Cookie", "session=s1"); got == shared || replayed == "true" {
			t.Errorf("%s with a cookie got the scheme-less scope's record", auth)
		}
		if got, replayed := send(after, "k2", "Authorization", auth); got == shared || replayed == "true" {
			t.Errorf("%s got the scheme-less scope's record", auth)
		}
	}
	anon, _ := send(before, "k3")
	if got, replayed := send(after, "k3", "Cookie", "session=s1"); got == anon || replayed == "true" {
		t.Error("a cookie caller got the anonymous scope's record")
	}
}

// BenchmarkTenant: what the default tenant costs a request carrying only
// Authorization, now (every credential header read) against the earlier
// default (Authorization alone), in one run.
func BenchmarkTenant(b *testing.B) {
	r := httptest.NewRequest("POST", "/charges", nil)
	r.Header.Set("Authorization", "Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "order-1")
	for _, f := range []struct {
		name string
		fn   idemhttp.TenantFunc
	}{{"earlier", formerDefault}, {"now", idemhttp.TenantCredentials}} {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := f.fn(r); !ok {
					b.Fatal("no tenant")
				}
			}
		})
	}
}
