package idemhttp

import (
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
)

// TestRoutePolicyMergeRule: the policy a compiled route runs is the
// engine's, its profile's over it, the route's over that, by the one rule
// of policies (idem.Policy.Overlay): a layer's set fields win, its unset
// ones keep the layer below, and a layer says "the default" by naming it
// (NoWait, OnFailureRelease). Route.Policy used to replace the engine's
// and the profile's policies whole, and the Stripe profile's no-wait was
// lost under an engine that waits.
func TestRoutePolicyMergeRule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		engine  idem.Policy
		profile *Profile
		route   *idem.Policy
		want    func(idem.Policy) bool
	}{
		{"stripe's no wait over an engine that waits", idem.Policy{Wait: 5 * time.Second}, Stripe(), nil,
			func(p idem.Policy) bool { return p.Wait == 0 }},
		{"a route's wait over stripe's no wait", idem.Policy{Wait: 5 * time.Second}, Stripe(), &idem.Policy{Wait: time.Second},
			func(p idem.Policy) bool { return p.Wait == time.Second }},
		{"a route keeps what it does not set", idem.Policy{Lease: 10 * time.Second, OnStale: idem.OnStaleConflict}, WorkflowAdmin(), &idem.Policy{TTL: time.Hour},
			func(p idem.Policy) bool {
				return p.TTL == time.Hour && p.Lease == 10*time.Second && p.OnStale == idem.OnStaleConflict && p.OnFailure == idem.OnFailureConflict && p.MaxKeyBytes == 200
			}},
		{"a route's release over its profile's conflict", idem.Policy{}, WorkflowAdmin(), &idem.Policy{OnFailure: idem.OnFailureRelease},
			func(p idem.Policy) bool { return p.OnFailure == idem.OnFailureRelease && p.TTL == 7*24*time.Hour }},
		{"an unset profile keeps the engine's", idem.Policy{OnFailure: idem.OnFailureCache, Wait: time.Second}, IETF(), nil,
			func(p idem.Policy) bool { return p.OnFailure == idem.OnFailureCache && p.Wait == time.Second }},
		{"a route's NoWait over the engine's wait", idem.Policy{Wait: time.Second}, IETF(), &idem.Policy{Wait: idem.NoWait},
			func(p idem.Policy) bool { return p.Wait == 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := idem.New(memory.New(), c.engine)
			defer eng.Close()
			r, err := compileRoute(eng, Route{Pattern: "POST /x", Profile: c.profile, Policy: c.route}, IETF())
			if err != nil {
				t.Fatal(err)
			}
			if got := r.eng.Policy(); !c.want(got) {
				t.Fatalf("the route runs %+v", got)
			}
		})
	}
}
