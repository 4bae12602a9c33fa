package config

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
)

// specExample is SPEC section 3's file, as an operator would write it.
const specExample = `
listen: 127.0.0.1:8080
upstream: http://127.0.0.1:3000
store: file:./idem-data          # memory: | postgres://... | redis://...
admin_listen: 127.0.0.1:9090
tenant: { header: X-User-ID }
defaults: { profile: ietf, ttl: 24h }
routes:
  - match: "POST /api/funnels/{slug}/assessments/{id}/answers/save"
    key: optional
    fingerprint: body
    profile: mobile
`

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func mustValid(t *testing.T, src string) (*Config, *Built) {
	t.Helper()
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	b, err := c.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return c, b
}

func TestSpecExample(t *testing.T) {
	t.Parallel()
	c, b := mustValid(t, specExample)
	if c.Listen != "127.0.0.1:8080" || c.Upstream != "http://127.0.0.1:3000" || c.Store != "file:./idem-data" || c.AdminListen != "127.0.0.1:9090" {
		t.Errorf("basics: %+v", c)
	}
	if b.Options.Tenant == nil {
		t.Fatal("tenant not set")
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-User-ID", "u1")
	if id, ok := b.Options.Tenant(r); !ok || id != "u1" {
		t.Errorf("tenant = %q, %v", id, ok)
	}
	if len(b.Options.Routes) != 1 {
		t.Fatalf("routes = %d", len(b.Options.Routes))
	}
	rt := b.Options.Routes[0]
	if rt.Profile == nil || rt.Profile.Name != "mobile" {
		t.Errorf("route profile = %v", rt.Profile)
	}
	if rt.Key != idemhttp.KeyOptional || !sameFingerprint(rt.Fingerprint, idemhttp.FingerprintBody) {
		t.Errorf("route key = %v, or its fingerprint is not the body's", rt.Key)
	}
	if rt.Policy == nil || rt.Policy.TTL != 24*time.Hour {
		t.Errorf("route policy = %+v", rt.Policy)
	}
	if b.Options.Profile.Name != "ietf" {
		t.Errorf("default profile = %s", b.Options.Profile.Name)
	}
	// The middleware accepts what Build made.
	if _, err := idemhttp.New(idem.New(nil, b.Policy), b.Options); err != nil {
		t.Errorf("idemhttp.New: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, b := mustValid(t, "upstream: http://localhost:3000\n")
	if c.Listen != DefaultListen || c.AdminListen != DefaultAdminListen || c.Store != DefaultStore {
		t.Errorf("defaults: %+v", c)
	}
	if c.LogFormat != "text" || c.LogLevel != "info" || !c.MigrateEnabled() || !c.AdminEnabled() {
		t.Errorf("defaults: %+v", c)
	}
	if len(b.Options.Routes) != 1 || b.Options.Routes[0].Pattern != "/" {
		t.Fatalf("want one catch-all route, got %+v", b.Options.Routes)
	}
	// Without tenant config, the middleware's default: a hash of every
	// credential, a keyed request with none refused.
	if b.Options.Tenant != nil || b.Options.SharedAnonymousScope || !strings.Contains(b.TenantSource, "gets 401") {
		t.Errorf("default tenant: %v, shared %v, %q", b.Options.Tenant != nil, b.Options.SharedAnonymousScope, b.TenantSource)
	}
	p := b.Options.Routes[0].Policy.WithDefaults()
	if p.TTL != idem.DefaultTTL || p.OnFailure != idem.OnFailureRelease || p.Wait != 0 {
		t.Errorf("policy = %+v", p)
	}
}

func TestEmptyFileNeedsUpstream(t *testing.T) {
	t.Parallel()
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "upstream is required") {
		t.Fatalf("Validate = %v, want upstream is required", err)
	}
}

func TestLayering(t *testing.T) {
	t.Parallel()
	_, b := mustValid(t, `
upstream: http://u:1
cleanup_interval: 10m
defaults:
  profile: stripe
  ttl: 2d
  wait: 5s
  on_failure: cache
  on_store_error: fail_open
  cache_statuses: "2xx"
  key: required
  fingerprint: none
routes:
  - match: POST /a                # defaults only
  - match: POST /b
    profile: workflow-admin       # its TTL, max key bytes, on_failure win over defaults
  - match: POST /c
    profile: workflow-admin
    ttl: 1h                       # the route's own field wins over its profile
    on_failure: release
    cache_statuses: [201, 409]
    key: optional
    fingerprint: { fields: [stepId, customer.id] }
`)
	rs := b.Options.Routes
	if len(rs) != 3 {
		t.Fatalf("routes = %d", len(rs))
	}
	a, bb, c := rs[0], rs[1], rs[2]
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("a.ttl", a.Policy.TTL, 48*time.Hour)
	check("a.wait", a.Policy.Wait, 5*time.Second)
	check("a.on_failure", a.Policy.OnFailure, idem.OnFailureCache)
	check("a.on_store_error", a.Policy.OnStoreError, idem.OnStoreErrorFailOpen)
	check("a.cleanup", a.Policy.CleanupInterval, 10*time.Minute)
	check("a.profile", a.Profile == nil, true)
	check("a.cache", a.Cache.Contains(201) && !a.Cache.Contains(409), true)
	check("a.key", a.Key, idemhttp.KeyRequired)
	check("a.fingerprint", sameFingerprint(a.Fingerprint, idemhttp.FingerprintNone), true)

	check("b.ttl", bb.Policy.TTL, 7*24*time.Hour)
	check("b.max_key", bb.Policy.MaxKeyBytes, 200)
	check("b.on_failure", bb.Policy.OnFailure, idem.OnFailureConflict)
	check("b.wait", bb.Policy.Wait, 5*time.Second) // not set by the profile
	check("b.on_store_error", bb.Policy.OnStoreError, idem.OnStoreErrorFailOpen)
	check("b.profile", bb.Profile.Name, "workflow-admin")
	check("b.cache", bb.Cache == nil, true) // the profile's own

	check("c.ttl", c.Policy.TTL, time.Hour)
	check("c.on_failure", c.Policy.OnFailure, idem.OnFailureRelease)
	check("c.cache", c.Cache.Contains(201) && c.Cache.Contains(409) && !c.Cache.Contains(200), true)
	check("c.key", c.Key, idemhttp.KeyOptional)
	check("c.fingerprint", sameFingerprint(c.Fingerprint, idemhttp.FingerprintFields("stepId", "customer.id")), true)

	if b.Options.Profile.Name != "stripe" {
		t.Errorf("default profile = %s", b.Options.Profile.Name)
	}
	if _, err := idemhttp.New(idem.New(nil, b.Policy), b.Options); err != nil {
		t.Errorf("idemhttp.New: %v", err)
	}
}

// TestKeepHeadersFormerName: keep_headers, replay_headers' former name,
// is still read, and Renamed reports it for the warning at start.
func TestKeepHeadersFormerName(t *testing.T) {
	t.Parallel()
	c, b := mustValid(t, "upstream: http://u:1\nkeep_headers: [X-Charge-Id]\n")
	if got := strings.Join(b.Options.ReplayHeaders, "|"); got != "X-Charge-Id" {
		t.Errorf("keep_headers: the middleware replays %q", got)
	}
	if w := c.Renamed(); len(w) != 1 || !strings.Contains(w[0], "replay_headers") {
		t.Errorf("Renamed = %q, want one warning naming replay_headers", w)
	}
}

func TestTypes(t *testing.T) {
	t.Parallel()
	_, _ = mustValid(t, "upstream: http://u:1\n")
	c, b := mustValid(t, `
upstream: https://api.example.com/base
max_request_bytes: 1MiB
max_response_bytes: 512kb
replay_headers: X-Charge-Id, X-Other
cleanup_interval: off
shutdown_timeout: 1m30s
admin_listen: off
migrate: false
log_format: json
log_level: debug
tenant: { authorization: hash }
`)
	if c.MaxRequestBytes != 1<<20 || c.MaxResponseBytes != 512000 {
		t.Errorf("sizes = %d, %d", c.MaxRequestBytes, c.MaxResponseBytes)
	}
	if got := strings.Join(c.ReplayHeaders, "|"); got != "X-Charge-Id|X-Other" || c.Renamed() != nil {
		t.Errorf("replay_headers = %q, renamed %q", got, c.Renamed())
	}
	if c.AdminEnabled() || c.MigrateEnabled() {
		t.Error("admin_listen: off or migrate: false ignored")
	}
	if time.Duration(c.ShutdownTimeout) != 90*time.Second {
		t.Errorf("shutdown_timeout = %v", time.Duration(c.ShutdownTimeout))
	}
	if b.Options.Routes[0].Policy.CleanupInterval >= 0 {
		t.Errorf("cleanup_interval off = %v, want negative", b.Options.Routes[0].Policy.CleanupInterval)
	}
	r := httptest.NewRequest("POST", "/", nil)
	if _, ok := b.Options.Tenant(r); ok {
		t.Error("tenant without Authorization")
	}
	r.Header.Set("Authorization", "Bearer x")
	if id, ok := b.Options.Tenant(r); !ok || strings.Contains(id, "Bearer") {
		t.Errorf("tenant = %q, %v", id, ok)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"500ms": 500 * time.Millisecond, "0": 0, "off": -1,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10", "7days", "d", "1x"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q): no error", in)
		}
	}
}

// TestErrors checks that every mistake is reported with the field's name.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, want string
	}{
		{"typo", "upstream: http://u:1\nlisen: :80\n", `unknown field "lisen"`},
		{"typo in defaults", "upstream: http://u:1\ndefaults: {tll: 1h}\n", `unknown field "tll"`},
		{"typo in route", "upstream: http://u:1\nroutes: [{match: /a, profle: ietf}]\n", `unknown field "profle"`},
		{"two documents", "upstream: http://u:1\n---\nlisten: :1\n", "more than one YAML document"},
		{"no upstream", "listen: :8080\n", "upstream is required"},
		{"bad upstream", "upstream: ftp://localhost:3000\n", "want an http:// or https:// URL"},
		{"bad listen", "upstream: http://u:1\nlisten: 8080\n", "listen:"},
		{"bad admin listen", "upstream: http://u:1\nadmin_listen: nope\n", "admin_listen:"},
		{"bad duration", "upstream: http://u:1\ndefaults: {ttl: 10}\n", "bad duration"},
		{"negative wait", "upstream: http://u:1\ndefaults: {wait: -1s}\n", "wait must not be negative"},
		{"lease over ttl", "upstream: http://u:1\ndefaults: {ttl: 1m, lease: 2m}\n", "longer than TTL"},
		{"bad on_failure", "upstream: http://u:1\ndefaults: {on_failure: retry}\n", "on_failure \"retry\""},
		{"bad on_stale", "upstream: http://u:1\ndefaults: {on_stale: wait}\n", "on_stale"},
		{"bad on_store_error", "upstream: http://u:1\ndefaults: {on_store_error: open}\n", "on_store_error"},
		{"bad profile", "upstream: http://u:1\ndefaults: {profile: paypal}\n", `profile "paypal"`},
		{"bad route profile", "upstream: http://u:1\nroutes: [{match: /a, profile: x}]\n", `routes[0] (/a): profile "x"`},
		{"bad key mode", "upstream: http://u:1\ndefaults: {key: always}\n", `key "always"`},
		{"bad fingerprint", "upstream: http://u:1\ndefaults: {fingerprint: headers}\n", "fingerprint \"headers\""},
		{"empty fields", "upstream: http://u:1\ndefaults: {fingerprint: {fields: []}}\n", "fields is empty"},
		{"fingerprint typo", "upstream: http://u:1\ndefaults: {fingerprint: {field: [a]}}\n", `unknown field "field"`},
		{"bad cache_statuses", "upstream: http://u:1\ndefaults: {cache_statuses: [2xx, 700]}\n", "cache_statuses"},
		{"route without match", "upstream: http://u:1\nroutes: [{key: required}]\n", "routes[0]: match is required"},
		{"bad pattern", "upstream: http://u:1\nroutes: [{match: \"POST charges\"}]\n", "routes[0] (POST charges)"},
		{"duplicate pattern", "upstream: http://u:1\nroutes: [{match: POST /a}, {match: POST /a}]\n", "routes[1] (POST /a)"},
		{"tenant both", "upstream: http://u:1\ntenant: {header: X-User-ID, authorization: hash}\n", "set one of header, authorization and cookie"},
		{"tenant all optional", "upstream: http://u:1\ntenant: [{header: X-A, optional: true}, {cookie: s, optional: true}]\n", "every source is optional"},
		{"tenant bad cookie", "upstream: http://u:1\ntenant: {cookie: \"a b\"}\n", "not a valid cookie name"},
		{"anonymous word", "upstream: http://u:1\nanonymous: allow\n", "want refuse"},
		{"anonymous with tenant", "upstream: http://u:1\nanonymous: shared\ntenant: {header: X-User-ID}\n", "default tenant only"},
		{"tenant empty", "upstream: http://u:1\ntenant: {}\n", "tenant: set header"},
		{"tenant bad auth", "upstream: http://u:1\ntenant: {authorization: raw}\n", "only supported value is hash"},
		{"tenant bad header", "upstream: http://u:1\ntenant: {header: \"X User\"}\n", "not a valid header name"},
		{"bad size", "upstream: http://u:1\nmax_response_bytes: lots\n", "bad size"},
		{"bad log format", "upstream: http://u:1\nlog_format: xml\n", "log_format"},
		{"bad log level", "upstream: http://u:1\nlog_level: loud\n", "log_level"},
		{"negative max key", "upstream: http://u:1\ndefaults: {max_key_bytes: -1}\n", "max_key_bytes"},
		{"negative tenant cap", "upstream: http://u:1\nmax_keys_per_tenant: -1\n", "max_keys_per_tenant: negative"},
		{"bad tenant bytes", "upstream: http://u:1\nmax_bytes_per_tenant: -1\n", "max_bytes_per_tenant: bad size"},
		{"raw keys without debug", "upstream: http://u:1\nlog_raw_keys: true\n", "set log_level: debug"},
		{"wrong type", "upstream: [a, b]\n", "line 1"},
		{"bad error_texts", "upstream: http://u:1\ndefaults: {error_texts: {in_progres: {code: X}}}\n", `unknown kind "in_progres"`},
		{"bad on_unknown", "upstream: http://u:1\ndefaults: {on_unknown: retry}\n", "on_unknown"},
		{"replay set-cookie", "upstream: http://u:1\nreplay_headers: [X-A, set-cookie]\n", "replay_headers: Set-Cookie is a credential header"},
		{"former name, set-cookie", "upstream: http://u:1\nkeep_headers: [X-A, set-cookie]\n", "keep_headers: Set-Cookie is a credential header"},
		{"both names", "upstream: http://u:1\nkeep_headers: [X-A]\nreplay_headers: [X-B]\n", "keep_headers and replay_headers are both set"},
		{"tenant word", "upstream: http://u:1\ntenant: all\n", "want none"},
		{"tenant list bad", "upstream: http://u:1\ntenant: [{header: X-A}, {authorization: raw}]\n", "only supported value is hash"},
		{"deadline under timeout", "upstream: http://u:1\nupstream_timeout: 10m\nupstream_deadline: 1m\n", "upstream_deadline"},
		{"route timeout over deadline", "upstream: http://u:1\nroutes: [{match: /a, upstream_timeout: 10m}]\n", "longer than upstream_deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src))
			if err == nil {
				err = c.Validate()
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestSeveralErrorsAtOnce(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("listen: x\ndefaults: {profile: nope}\nlog_format: xml\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{"upstream is required", "listen:", "profile \"nope\"", "log_format"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("listen: 127.0.0.1:1\nupstream: http://file:1\nstore: \"memory:\"\nadmin_listen: 127.0.0.1:2\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"IDEM_LISTEN":       "127.0.0.1:8081",
		"IDEM_UPSTREAM":     "http://env:2",
		"IDEM_STORE":        "file:/tmp/x",
		"IDEM_ADMIN_LISTEN": "off",
		"IDEM_ADMIN_TOKEN":  "s3cret",
		"IDEM_LOG_FORMAT":   "json",
		"IDEM_LOG_LEVEL":    "",
	}
	c.ApplyEnv(func(k string) string { return env[k] })
	if c.Listen != "127.0.0.1:8081" || c.Upstream != "http://env:2" || c.Store != "file:/tmp/x" ||
		c.AdminListen != "off" || c.AdminToken != "s3cret" || c.LogFormat != "json" {
		t.Errorf("after env: %+v", c)
	}
	if c.LogLevel != "" {
		t.Errorf("empty variable overrode: %q", c.LogLevel)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "idem.yaml")
	if err := os.WriteFile(p, []byte(specExample), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil || c.Upstream != "http://127.0.0.1:3000" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load of a missing file: no error")
	}
	if err := os.WriteFile(p, []byte("lisen: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("Load error %v should name the file and the line", err)
	}
}

// sameFingerprint reports whether two fingerprint functions agree on a few
// requests that tell body, fields and none apart.
func sameFingerprint(a, b idemhttp.FingerprintFunc) bool {
	for _, body := range []string{`{"stepId":1,"customer":{"id":2},"x":1}`, `{"stepId":1,"customer":{"id":2},"x":2}`, `{"stepId":3}`} {
		r := httptest.NewRequest("POST", "/a", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if a == nil || b == nil || a(r, []byte(body)) != b(r, []byte(body)) {
			return false
		}
	}
	return true
}

// TestEdgeSettings: the route-level settings of outcome-unknown handling
// and the tenant forms.
func TestEdgeSettings(t *testing.T) {
	t.Parallel()
	_, b := mustValid(t, `
upstream: http://127.0.0.1:3000
upstream_timeout: 2s
body_read_timeout: 5s
replay_headers: [Set-Cookie]
allow_credential_headers: true
tenant: [{authorization: hash}, {header: Stripe-Account}]
defaults: {on_unknown: release}
routes:
  - match: POST /a
  - match: POST /b
    on_unknown: conflict
    upstream_timeout: 500ms
`)
	a, bb := b.Options.Routes[0], b.Options.Routes[1]
	if a.Policy.OnUnknown != idem.OnUnknownRelease || bb.Policy.OnUnknown != idem.OnUnknownConflict {
		t.Errorf("on_unknown = %v, %v", a.Policy.OnUnknown, bb.Policy.OnUnknown)
	}
	if a.AnswerWithin != 2*time.Second || bb.AnswerWithin != 500*time.Millisecond {
		t.Errorf("answer within = %v, %v", a.AnswerWithin, bb.AnswerWithin)
	}
	if b.Options.BodyReadTimeout != 5*time.Second {
		t.Errorf("body_read_timeout = %v", b.Options.BodyReadTimeout)
	}
	if !b.Options.AllowCredentialHeaders {
		t.Error("allow_credential_headers ignored")
	}
	tenant := func(h ...string) string {
		r := httptest.NewRequest("POST", "/a", nil)
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		id, ok := b.Options.Tenant(r)
		if !ok {
			t.Fatalf("no tenant for %v", h)
		}
		return id
	}
	x := tenant("Authorization", "Bearer T", "Stripe-Account", "acct_1")
	if x != tenant("Authorization", "bearer  T", "Stripe-Account", "acct_1") || x == tenant("Authorization", "Bearer T", "Stripe-Account", "acct_2") {
		t.Error("tenant list: the scheme's case matters, or Stripe-Account does not")
	}
	// A source missing: no tenant (401), never a hash of the rest.
	for _, h := range [][]string{{"Authorization", "Bearer T"}, {"Stripe-Account", "acct_1"}, {}} {
		r := httptest.NewRequest("POST", "/a", nil)
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		if id, ok := b.Options.Tenant(r); ok {
			t.Errorf("tenant list, only %v: %q", h, id)
		}
	}
	// The tenant is never keyed by the secret (CredentialMAC, set after
	// Build as the command would): it is part of its records' identity.
	b.Options.CredentialMAC = func(b []byte) string { return "mac" }
	if tenant("Authorization", "Bearer T", "Stripe-Account", "acct_1") != x {
		t.Error("CredentialMAC changed the tenant")
	}
	if !strings.Contains(b.TenantSource, "Authorization + Stripe-Account") {
		t.Errorf("tenant source %q", b.TenantSource)
	}
	_, n := mustValid(t, "upstream: http://u:1\ntenant: none\n")
	if id, ok := n.Options.Tenant(httptest.NewRequest("POST", "/", nil)); !ok || id != "" || !strings.HasPrefix(n.TenantSource, "none") {
		t.Errorf("tenant none: %q %v %q", id, ok, n.TenantSource)
	}
}

// TestErrorTexts: the mobile app's texts are a preset that configuration
// rewords, kind by kind.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	_, b := mustValid(t, `
upstream: http://127.0.0.1:3000
routes:
  - match: POST /app/
    profile: mobile
    error_texts:
      in_progress: { message: "Bitte warten." }
`)
	rt := b.Options.Routes[0]
	rec := httptest.NewRecorder()
	rt.Profile.WriteProblem(rec, &idemhttp.Problem{Kind: idemhttp.KindInProgress, Status: 409})
	if !strings.Contains(rec.Body.String(), `"message":"Bitte warten."`) || !strings.Contains(rec.Body.String(), `"code":"OPERATION_IN_PROGRESS"`) {
		t.Errorf("reworded: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	rt.Profile.WriteProblem(rec, &idemhttp.Problem{Kind: idemhttp.KindPayloadMismatch, Status: 409})
	if !strings.Contains(rec.Body.String(), "DUPLICATE_OPERATION") {
		t.Errorf("preset text lost: %s", rec.Body)
	}
	if idemhttp.MobileTexts()[idemhttp.KindInProgress].Message == "Bitte warten." {
		t.Error("the preset itself changed")
	}
}

// TestTenantForms: a cookie source, an optional source, and anonymous:
// shared, as Build turns them into the middleware's options.
func TestTenantForms(t *testing.T) {
	t.Parallel()
	_, b := mustValid(t, "upstream: http://u:1\ntenant: [{cookie: session}, {header: Stripe-Account, optional: true}]\n")
	tenant := func(h ...string) (string, bool) {
		r := httptest.NewRequest("POST", "/", nil)
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Add(h[i], h[i+1])
		}
		return b.Options.Tenant(r)
	}
	a, ok := tenant("Cookie", "session=s1; _ga=1")
	if again, _ := tenant("Cookie", "_ga=2; session=s1"); !ok || again != a || strings.Contains(a, "s1") {
		t.Errorf("session cookie: %q, %v; again %q", a, ok, again)
	}
	if acct, _ := tenant("Cookie", "session=s1", "Stripe-Account", "acct_1"); acct == a {
		t.Error("the optional source does not count when present")
	}
	if id, ok := tenant("Cookie", "_ga=1", "Stripe-Account", "acct_1"); ok {
		t.Errorf("no session cookie: %q", id)
	}
	if !strings.Contains(b.TenantSource, "cookie session + Stripe-Account (optional)") {
		t.Errorf("tenant source %q", b.TenantSource)
	}
	_, s := mustValid(t, "upstream: http://u:1\nanonymous: shared\n")
	if s.Options.Tenant != nil || !s.Options.SharedAnonymousScope || !strings.Contains(s.TenantSource, "anonymous: shared") {
		t.Errorf("anonymous: shared: %v %q", s.Options.SharedAnonymousScope, s.TenantSource)
	}
}

// The caps per caller take their defaults, the anonymous scope's lower one
// only when anonymous: shared opts into it, and 0 turns each off.
func TestTenantCaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src               string
		keys, anon, bytes int64
	}{
		{"upstream: http://u:1\n", DefaultMaxKeysPerTenant, 0, DefaultMaxBytesPerTenant},
		{"upstream: http://u:1\nanonymous: shared\n", DefaultMaxKeysPerTenant, DefaultMaxKeysAnonymous, DefaultMaxBytesPerTenant},
		{"upstream: http://u:1\ntenant: none\n", DefaultMaxKeysPerTenant, 0, DefaultMaxBytesPerTenant},
		{"upstream: http://u:1\nmax_keys_per_tenant: 0\nmax_keys_anonymous: 0\nmax_bytes_per_tenant: 0\n", 0, -1, 0},
		{"upstream: http://u:1\nmax_keys_per_tenant: 50\nmax_keys_anonymous: 5\nmax_bytes_per_tenant: 1MiB\n", 50, 5, 1 << 20},
	} {
		c, err := Parse([]byte(tc.src))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		b, err := c.Build()
		if err != nil {
			t.Fatal(err)
		}
		o := b.Options
		if int64(o.MaxKeysPerTenant) != tc.keys || int64(o.MaxKeysAnonymous) != tc.anon || o.MaxBytesPerTenant != tc.bytes {
			t.Errorf("%q: keys %d anonymous %d bytes %d; want %d %d %d", tc.src, o.MaxKeysPerTenant, o.MaxKeysAnonymous, o.MaxBytesPerTenant, tc.keys, tc.anon, tc.bytes)
		}
	}
}

// TestAdminTokenRefused: an admin token shorter than 16 bytes, or one of
// the placeholders the documentation and manifests have shown, is refused
// at start with the fix named; a random one of 16 bytes or more passes.
func TestAdminTokenRefused(t *testing.T) {
	t.Parallel()
	base := "listen: 127.0.0.1:1\nupstream: http://127.0.0.1:2\nstore: \"memory:\"\n"
	for _, tok := range []string{"change-me", "change-me-to-a-long-random-token", "CHANGE-ME-to-a-long-random-token-please", "...", "t0k", "s3cret", "fifteen-bytes-x", "a-changeme-token-of-40-bytes-xxxxxxxxxxx"} {
		c, err := Parse([]byte(base + "admin_token: \"" + tok + "\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Validate()
		if !errors.Is(err, ErrWeakAdminToken) || !strings.Contains(err.Error(), "openssl rand -base64 32") {
			t.Errorf("admin_token %q: %v, want ErrWeakAdminToken with the fix", tok, err)
		}
	}
	for _, tok := range []string{"sixteen-bytes-xx", "Zm9vYmFyYmF6cXV4cXV1eA0K0123456789"} {
		c, err := Parse([]byte(base + "admin_token: \"" + tok + "\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("admin_token %q: %v", tok, err)
		}
	}
	// From the environment too.
	c, _ := Parse([]byte(base))
	c.ApplyEnv(func(k string) string {
		if k == "IDEM_ADMIN_TOKEN" {
			return "change-me"
		}
		return ""
	})
	if err := c.Validate(); !errors.Is(err, ErrWeakAdminToken) {
		t.Errorf("IDEM_ADMIN_TOKEN=change-me: %v", err)
	}
}
