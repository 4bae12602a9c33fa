package config

import (
	"testing"
	"time"

	"github.com/idem-dev/idem"
)

// TestPolicyMergeRule: a route's policy is its own fields over its
// profile's over the defaults', by one rule (idem.Policy.Overlay): what a
// layer sets wins, what it leaves unset keeps the layer below, and a layer
// can set a field back to its zero default (a profile that says "no wait"
// over defaults that wait; an on_failure: release over a profile that
// keeps failures). The stripe profile's documented in-flight 409 without
// waiting used to be lost under defaults with a wait.
func TestPolicyMergeRule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       func(idem.Policy) bool
	}{
		{"a profile's no wait over defaults that wait", "defaults: {wait: 5s}\nroutes: [{match: \"POST /charges\", profile: stripe}]\n",
			func(p idem.Policy) bool { return p.Wait == 0 }},
		{"a route's wait over its profile's no wait", "defaults: {wait: 5s}\nroutes: [{match: \"POST /charges\", profile: stripe, wait: 2s}]\n",
			func(p idem.Policy) bool { return p.Wait == 2*time.Second }},
		{"a route's wait 0 over defaults that wait", "defaults: {wait: 5s}\nroutes: [{match: \"POST /charges\", wait: 0s}]\n",
			func(p idem.Policy) bool { return p.Wait == 0 }},
		{"a route's release over its profile's conflict", "routes: [{match: \"POST /charges\", profile: workflow-admin, on_failure: release}]\n",
			func(p idem.Policy) bool { return p.OnFailure == idem.OnFailureRelease && p.TTL == 7*24*time.Hour }},
		{"a profile's conflict over defaults' cache", "defaults: {on_failure: cache}\nroutes: [{match: \"POST /charges\", profile: workflow-admin}]\n",
			func(p idem.Policy) bool { return p.OnFailure == idem.OnFailureConflict }},
		{"a profile leaves what it does not set", "defaults: {lease: 10s, on_stale: conflict}\nroutes: [{match: \"POST /charges\", profile: stripe}]\n",
			func(p idem.Policy) bool { return p.Lease == 10*time.Second && p.OnStale == idem.OnStaleConflict }},
		{"a profile's TTL over defaults' TTL", "defaults: {ttl: 48h}\nroutes: [{match: \"POST /charges\", profile: mobile}]\n",
			func(p idem.Policy) bool { return p.TTL == 24*time.Hour }},
		{"a route's TTL over its profile's", "routes: [{match: \"POST /charges\", profile: mobile, ttl: 1h}]\n",
			func(p idem.Policy) bool { return p.TTL == time.Hour }},
		{"defaults' profile, then defaults' fields", "defaults: {profile: workflow-admin, on_failure: release}\nroutes: [{match: \"POST /charges\"}]\n",
			func(p idem.Policy) bool { return p.OnFailure == idem.OnFailureRelease && p.TTL == 7*24*time.Hour }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			b, err := cfg.Build()
			if err != nil {
				t.Fatal(err)
			}
			// What the middleware runs: the engine's policy (the
			// defaults'), the route's profile's, then the route's.
			rt := b.Options.Routes[0]
			pol := b.Policy
			if rt.Profile != nil {
				pol = pol.Overlay(rt.Profile.Policy)
			}
			if rt.Policy != nil {
				pol = pol.Overlay(*rt.Policy)
			}
			if got := pol.WithDefaults(); !c.want(got) {
				t.Fatalf("%s: the route's policy is %+v", c.yaml, got)
			}
		})
	}
}
