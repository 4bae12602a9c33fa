package idemhttp_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem/idemhttp"
)

// TestPathVariants: a non-safe request on a variant of a protected route's
// path (trailing slash, case, encoded slash, ;parameters) that no route
// covers as written is refused with 400 path_variant naming the route,
// when it carries a key or the route requires one; nothing runs. A route
// for the variant wins, a key-less request on a variant of a route whose
// key is optional passes as it would on the route, and paths that are no
// variant pass untouched.
func TestPathVariants(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	s := newServer(t, idemhttp.Options{Routes: []idemhttp.Route{
		{Pattern: "POST /charges", Key: idemhttp.KeyRequired},
		{Pattern: "POST /refunds"},
		{Pattern: "POST /refunds/{$}"},
		{Pattern: "POST /api/{acct}/payouts"},
	}}, echoAPI(&n))
	variants := []string{"/charges/", "/Charges", "/charges%2F", "/charges%2f", "/charges;x", "/CHARGES;jsessionid=1/", "/api/Acme/Payouts", "/api/acme/payouts;v=2"}
	for _, path := range variants {
		want := "POST /charges"
		if strings.HasPrefix(path, "/api") {
			want = "POST /api/{acct}/payouts"
		}
		p := problem(t, s.do("POST", path, `{}`, "Idempotency-Key", "k"), 400, idemhttp.KindPathVariant)
		if d, _ := p["detail"].(string); !strings.Contains(d, want) {
			t.Errorf("%s: detail %q does not name %s", path, d, want)
		}
		if want == "POST /charges" {
			problem(t, s.do("POST", path, `{}`), 400, idemhttp.KindPathVariant) // the key is required there
		}
	}
	if n.Load() != 0 {
		t.Fatalf("%d runs on variants", n.Load())
	}
	// The route itself, the variant with a route of its own, a variant
	// without a key where keys are optional, and no variants: as ever.
	a := s.do("POST", "/refunds/", `{}`, "Idempotency-Key", "k")
	sameResponse(t, a, s.do("POST", "/refunds/", `{}`, "Idempotency-Key", "k"))
	for _, path := range []string{"/Refunds", "/refunds;x"} {
		problem(t, s.do("POST", path, `{}`, "Idempotency-Key", "k"), 400, idemhttp.KindPathVariant)
		if r := s.do("POST", path, `{}`); r.Status != 201 {
			t.Errorf("key-less %s on an optional route: %d %s", path, r.Status, r.Body)
		}
	}
	if r := s.do("POST", "/api/Acme/payouts", `{}`, "Idempotency-Key", "k-payout"); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "false" {
		t.Errorf("a wildcard's value in capitals is the route itself: %d %v", r.Status, r.Header)
	}
	for _, path := range []string{"/chargesx", "/other/", "/a;b"} {
		if r := s.do("POST", path, `{}`, "Idempotency-Key", "k-"+path); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s is no variant: %d %v", path, r.Status, r.Header)
		}
	}
	if r := s.do("GET", "/Charges/", ""); r.Status != 201 {
		t.Errorf("GET on a variant: %d", r.Status)
	}
}
