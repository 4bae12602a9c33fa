package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
)

// Built is what a Config means for the middleware.
type Built struct {
	// Options are the middleware's options; the caller sets Logger and
	// Observe.
	Options idemhttp.Options
	// Policy is the defaults' policy: the engine's own, used by commands
	// that run outside a route (cleanup).
	Policy idem.Policy
	// TenantSource says, for the start-up log, where tenants come from.
	TenantSource string
}

// Patterns returns the route patterns, in order: the metrics' route
// label values.
func (b *Built) Patterns() []string {
	out := make([]string, len(b.Options.Routes))
	for i, r := range b.Options.Routes {
		out[i] = r.Pattern
	}
	return out
}

// Build turns the policy parts of c into middleware options. Every route
// gets an explicit policy, so that cleanup_interval reaches all of them.
func (c *Config) Build() (*Built, error) {
	var errs []error
	cleanup := time.Duration(0)
	if c.CleanupInterval != nil {
		cleanup = time.Duration(*c.CleanupInterval)
	}

	defProf, err := profile(c.Defaults.Profile)
	if err != nil {
		errs = append(errs, fmt.Errorf("defaults.%w", err))
		defProf = idemhttp.IETF()
	}
	base := defProf.Policy
	if err := c.Defaults.apply(&base); err != nil {
		errs = append(errs, fmt.Errorf("defaults: %w", err))
	}
	base.CleanupInterval = cleanup
	if err := base.WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("defaults: %s", strings.TrimPrefix(err.Error(), "idem: policy: ")))
	}

	b := &Built{Policy: base}
	b.Options = idemhttp.Options{
		Profile:                defProf,
		MaxRequestBytes:        int64(c.MaxRequestBytes),
		BodyReadTimeout:        time.Duration(c.BodyReadTimeout),
		MaxResponseBytes:       int(c.MaxResponseBytes),
		ReplayHeaders:          c.replayHeaders(),
		AllowCredentialHeaders: c.AllowCredentialHeaders,
		RequestIDHeader:        c.RequestIDHeader,
		MaxKeysPerTenant:       int(c.maxKeys(c.MaxKeysPerTenant)),
		MaxBytesPerTenant:      c.maxBytesPerTenant(),
	}
	switch {
	case c.MaxKeysAnonymous != nil:
		b.Options.MaxKeysAnonymous = int(*c.MaxKeysAnonymous)
		if b.Options.MaxKeysAnonymous == 0 {
			b.Options.MaxKeysAnonymous = -1 // off, as 0 means in the file
		}
	case c.Anonymous == AnonymousShared:
		// Every caller without credentials is one tenant, capped lower
		// than one caller (tenant: none, where everyone is that tenant,
		// keeps max_keys_per_tenant).
		b.Options.MaxKeysAnonymous = DefaultMaxKeysAnonymous
	}
	b.Options.SharedAnonymousScope = c.Anonymous == AnonymousShared
	b.Options.Tenant, b.TenantSource, err = c.Tenant.build(b.Options.SharedAnonymousScope)
	if err != nil {
		errs = append(errs, err)
	}

	routes := c.Routes
	if len(routes) == 0 {
		routes = []Route{{Match: "/"}} // the catch-all, with the defaults
	}
	mux := http.NewServeMux()
	seen := map[string]int{}
	for i, r := range routes {
		where := fmt.Sprintf("routes[%d]", i)
		if len(c.Routes) == 0 {
			where = "defaults"
		}
		if r.Match == "" {
			errs = append(errs, fmt.Errorf("%s: match is required (a ServeMux pattern such as \"POST /charges\")", where))
			continue
		}
		where = fmt.Sprintf("%s (%s)", where, r.Match)
		if j, dup := seen[r.Match]; dup {
			errs = append(errs, fmt.Errorf("%s: the same pattern as routes[%d]; a request can match only one route, so merge them", where, j))
			continue
		}
		seen[r.Match] = i
		if err := checkPattern(r.Match); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if err := register(mux, r.Match); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", where, err))
			continue
		}
		rt, err := c.route(r, defProf, base)
		if err == nil {
			rt.AnswerWithin, err = c.answerWithin(r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		b.Options.Routes = append(b.Options.Routes, rt)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b, nil
}

// route resolves one route's layers: base (the defaults' profile and
// fields), then the route's profile, then the route's own fields.
func (c *Config) route(r Route, defProf *idemhttp.Profile, base idem.Policy) (idemhttp.Route, error) {
	rt := idemhttp.Route{Pattern: r.Match}
	pol := base
	if r.Profile != "" {
		p, err := profile(r.Profile)
		if err != nil {
			return rt, err
		}
		rt.Profile = p
		pol = pol.Overlay(p.Policy)
	}
	if err := r.apply(&pol); err != nil {
		return rt, err
	}
	if err := pol.WithDefaults().Validate(); err != nil {
		return rt, errors.New(strings.TrimPrefix(err.Error(), "idem: policy: "))
	}
	rt.Policy = &pol

	var err error
	switch {
	case r.CacheStatuses != nil:
		rt.Cache, err = statusSet(r.CacheStatuses)
	case r.Profile == "" && c.Defaults.CacheStatuses != nil:
		rt.Cache, err = statusSet(c.Defaults.CacheStatuses)
	}
	if err != nil {
		return rt, err
	}

	if err := c.errorTexts(&rt, r, defProf); err != nil {
		return rt, err
	}

	key := firstOf(r.Key, c.Defaults.Key, "optional")
	switch key {
	case "optional":
		rt.Key = idemhttp.KeyOptional
	case "required":
		rt.Key = idemhttp.KeyRequired
	default:
		return rt, fmt.Errorf("key %q: want required or optional", key)
	}

	fp := r.Fingerprint
	if fp == nil {
		fp = c.Defaults.Fingerprint
	}
	if fp != nil {
		switch fp.Mode {
		case "body":
			rt.Fingerprint = idemhttp.FingerprintBody
		case "none":
			rt.Fingerprint = idemhttp.FingerprintNone
		case "fields":
			rt.Fingerprint = idemhttp.FingerprintFields(fp.Fields...)
		}
	}
	return rt, nil
}

// errorTexts gives the route a copy of its profile whose answers use the
// error envelope with the texts of defaults and route laid over the
// profile's preset (the mobile app's), when either sets any.
func (c *Config) errorTexts(rt *idemhttp.Route, r Route, defProf *idemhttp.Profile) error {
	if len(c.Defaults.ErrorTexts) == 0 && len(r.ErrorTexts) == 0 {
		return nil
	}
	prof := rt.Profile
	if prof == nil {
		prof = defProf
	}
	texts := map[idemhttp.Kind]idemhttp.Text{}
	if prof.Name == "mobile" {
		texts = idemhttp.MobileTexts()
	}
	for _, layer := range []map[string]ErrorText{c.Defaults.ErrorTexts, r.ErrorTexts} {
		for k, v := range layer {
			kind := idemhttp.Kind(k)
			if _, ok := idemhttp.DefaultStatus()[kind]; !ok {
				return fmt.Errorf("error_texts: unknown kind %q (see docs/problems.md)", k)
			}
			t := texts[kind]
			if v.Code != "" {
				t.Code = v.Code
			}
			if v.Message != "" {
				t.Message = v.Message
			}
			texts[kind] = t
		}
	}
	p := *prof
	p.WriteProblem = idemhttp.Envelope(texts)
	rt.Profile = &p
	return nil
}

// answerWithin is the route's upstream_timeout, else the top-level one.
func (c *Config) answerWithin(r Route) (time.Duration, error) {
	if r.UpstreamTimeout == nil {
		return time.Duration(c.UpstreamTimeout), nil
	}
	d := time.Duration(*r.UpstreamTimeout)
	if d < 0 {
		return 0, errors.New("upstream_timeout must not be negative")
	}
	if c.UpstreamDeadline > 0 && d > time.Duration(c.UpstreamDeadline) {
		return 0, fmt.Errorf("upstream_timeout %s is longer than upstream_deadline %s", d, time.Duration(c.UpstreamDeadline))
	}
	return d, nil
}

func statusSet(l StringList) (idemhttp.StatusSet, error) {
	s, err := parseStatusSet(l)
	if err != nil {
		return nil, fmt.Errorf("cache_statuses: %w", err)
	}
	if len(s) == 0 {
		return nil, errors.New("cache_statuses is empty: list the statuses to replay, e.g. [2xx, 409]")
	}
	return s, nil
}

// apply sets the fields p sets explicitly onto pol.
func (p *Policy) apply(pol *idem.Policy) error {
	// The fields set here are laid over pol by the one rule of policies
	// (idem.Policy.Overlay); a wait written as 0 says "no wait" over a
	// base that waits.
	var errs []error
	var over idem.Policy
	if p.TTL != nil {
		over.TTL = time.Duration(*p.TTL)
	}
	if p.Lease != nil {
		over.Lease = time.Duration(*p.Lease)
	}
	if p.Wait != nil {
		if over.Wait = time.Duration(*p.Wait); over.Wait == 0 {
			over.Wait = idem.NoWait
		}
	}
	if p.MaxKeyBytes != 0 {
		over.MaxKeyBytes = int(p.MaxKeyBytes)
	}
	if p.OnFailure != "" {
		v, err := parseOnFailure(p.OnFailure)
		errs = append(errs, err)
		over.OnFailure = v
	}
	if p.OnStale != "" {
		v, err := parseOnStale(p.OnStale)
		errs = append(errs, err)
		over.OnStale = v
	}
	if p.OnStoreError != "" {
		v, err := parseOnStoreError(p.OnStoreError)
		errs = append(errs, err)
		over.OnStoreError = v
	}
	if p.OnUnknown != "" {
		v, err := parseOnUnknown(p.OnUnknown)
		errs = append(errs, err)
		over.OnUnknown = v
	}
	*pol = pol.Overlay(over)
	for _, d := range []struct {
		name string
		v    *Duration
	}{{"ttl", p.TTL}, {"lease", p.Lease}, {"wait", p.Wait}} {
		if d.v != nil && *d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if p.MaxKeyBytes < 0 {
		errs = append(errs, errors.New("max_key_bytes must not be negative"))
	}
	return errors.Join(errs...)
}

func profile(name string) (*idemhttp.Profile, error) {
	if name == "" {
		name = "ietf"
	}
	for _, p := range []*idemhttp.Profile{idemhttp.IETF(), idemhttp.Stripe(), idemhttp.Mobile(), idemhttp.WorkflowAdmin()} {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("profile %q: want one of ietf, stripe, mobile, workflow-admin", name)
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// registeredAt is ServeMux's note of where a pattern was registered: a Go
// source path, which means nothing to the user of a config file.
var registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)

// register checks a pattern the way the middleware will use it: ServeMux
// panics on a bad or conflicting pattern.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			msg := registeredAt.ReplaceAllString(fmt.Sprint(p), "")
			msg = strings.ReplaceAll(msg, ":\n", ": ")
			err = errors.New(strings.ReplaceAll(msg, "\n", " "))
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// ParseLevel parses a log level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
