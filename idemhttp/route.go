package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemwire"
)

// Route is the policy of the requests matching Pattern. Its decisions are
// plain function fields, as httputil.ReverseProxy's hooks are: nil means
// the route's profile decides, so that a route can change one decision
// (say, its scope) and keep every other.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("POST /charges",
	// "POST /api/funnels/{slug}/assessments/{id}/answers/save"). Empty
	// matches every request.
	Pattern string
	// Key says whether a request without a key passes (KeyOptional, the
	// default) or gets 400 (KeyRequired).
	Key KeyMode
	// Profile is the route's profile; nil means Options.Profile.
	Profile *Profile
	// Policy, when not nil, is laid over the route's profile's policy,
	// itself laid over the engine's (idem.Policy.Overlay, the one rule by
	// which policies combine: a zero field keeps what is below it). nil
	// means the profile's.
	Policy *idem.Policy
	// Cache, when not nil, replaces the profile's set of outcome statuses.
	Cache StatusSet
	// AnswerWithin, when positive, bounds the client's wait for the first
	// execution: past it the client gets 504 upstream_timeout ("the call
	// may still complete; retry with the same key") while the handler goes
	// on in the background, its lease renewed, until it finishes; retries
	// meanwhile get 409 in_progress, then the recorded outcome. The
	// handler's own bound (the gateway's upstream_deadline) stops it.
	AnswerWithin time.Duration

	// Scope returns the namespace of the request's key given its tenant
	// (see Scope.Format). nil means the profile's Scope.
	Scope func(r *http.Request, tenant string) string
	// Binding returns the action and target a key is bound to; a key
	// reused with another binding is a key_reused conflict. nil means
	// "METHOD /path".
	Binding func(r *http.Request) string
	// Fingerprint returns what makes two requests with one key the same
	// (FingerprintBody, FingerprintNone, FingerprintFields); "" means no
	// check. nil means FingerprintBody.
	Fingerprint FingerprintFunc
	// WriteProblem writes idem's own answers on this route; the problem's
	// Status is already set from the profile. nil means the profile's.
	WriteProblem func(w http.ResponseWriter, p *Problem)
}

// FingerprintFunc returns a request's fingerprint from the request and its
// body, which the middleware has read.
type FingerprintFunc func(r *http.Request, body []byte) string

// FingerprintBody is the default fingerprint: method, target and body;
// JSON bodies canonicalized so that member order and white space do not
// matter.
func FingerprintBody(r *http.Request, body []byte) string {
	return idem.HashRequest(r.Method, r.URL.RequestURI(), body, isJSON(r.Header.Get("Content-Type"), body))
}

// FingerprintNone makes no check: any request with the key replays the
// first outcome (endpoints without a payload check).
func FingerprintNone(*http.Request, []byte) string { return "" }

// FingerprintFields fingerprints method, target and the chosen JSON fields
// ("stepId", "customer.id"). A body that is not JSON is taken as a whole.
func FingerprintFields(fields ...string) FingerprintFunc {
	fields = append([]string(nil), fields...)
	return func(r *http.Request, body []byte) string {
		digest, err := idem.HashJSONFields(body, fields...)
		if err != nil {
			digest = idem.HashBytes(body)
		}
		return idem.HashStrings(r.Method, r.URL.RequestURI(), digest)
	}
}

// route is a Route compiled once: every decision filled in, the policy and
// the set of outcome statuses resolved.
type route struct {
	Route
	profile *Profile
	eng     *idem.Engine
	outcome StatusSet // the statuses recorded as outcomes: Route.Cache, else the profile's, else defaultCache

	// lastBinding is the default binding last made: most keyed requests of
	// a route go to one endpoint (POST /charges), which then needs no new
	// string per request.
	lastBinding atomic.Pointer[string]
	// lastExpires is the expiry a first call last sent: the first calls of
	// one second expire in one second (the store's now plus the route's
	// TTL), and share its HTTP-date.
	lastExpires atomic.Pointer[unixDate]
}

// unixDate is the HTTP-date of a second.
type unixDate struct {
	unix int64
	date string
}

// expiresDate is httpDate(t) for a first call's expiry.
func (r *route) expiresDate(t time.Time) string {
	if d := r.lastExpires.Load(); d != nil && d.unix == t.Unix() {
		return d.date
	}
	d := &unixDate{t.Unix(), httpDate(t)}
	r.lastExpires.Store(d)
	return d.date
}

// defaultBinding is "METHOD /path".
func (r *route) defaultBinding(req *http.Request) string {
	m, p := req.Method, req.URL.Path
	if b := r.lastBinding.Load(); b != nil && len(*b) == len(m)+1+len(p) &&
		(*b)[:len(m)] == m && (*b)[len(m)] == ' ' && (*b)[len(m)+1:] == p {
		return *b
	}
	b := m + " " + p
	r.lastBinding.Store(&b)
	return b
}

func compileRoute(eng *idem.Engine, rt Route, def *Profile) (*route, error) {
	r := &route{Route: rt, profile: rt.Profile}
	if r.profile == nil {
		r.profile = def
	}
	if r.Pattern == "" {
		r.Pattern = "/"
	}
	switch {
	case rt.Cache != nil:
		r.outcome = rt.Cache
	case r.profile.Cache != nil:
		r.outcome = r.profile.Cache
	default:
		r.outcome = defaultCache
	}
	pol := eng.Policy().Overlay(r.profile.Policy)
	if rt.Policy != nil {
		pol = pol.Overlay(*rt.Policy)
	}
	if err := pol.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	if rt.AnswerWithin < 0 {
		return nil, errors.New("AnswerWithin is negative")
	}
	r.eng = eng.WithPolicy(pol)
	prof := r.profile
	if r.Route.Scope == nil {
		r.Route.Scope = func(req *http.Request, tenant string) string {
			return prof.Scope.Format(tenant, req.Method, req.URL.Path)
		}
	}
	if r.Binding == nil {
		r.Binding = r.defaultBinding
	}
	if r.Fingerprint == nil {
		r.Fingerprint = FingerprintBody
	}
	write := rt.WriteProblem
	if write == nil {
		write = prof.WriteProblem
	}
	if write == nil {
		write = WriteProblemJSON
	}
	r.WriteProblem = func(w http.ResponseWriter, p *Problem) {
		if p.Status == 0 {
			p.Status = prof.status(p.Kind)
		}
		// In every shape, a profile's own writer's too: clients read the
		// expiry from the header whatever the body looks like.
		setExpires(w.Header(), p.KeyExpires)
		write(w, p)
	}
	return r, nil
}

// routeMarker is registered in the ServeMux only to learn which route a
// request matches: matching uses the standard library's pattern rules.
type routeMarker int

func (routeMarker) ServeHTTP(http.ResponseWriter, *http.Request) {}

func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// match returns the route covering r, or nil: safe methods and requests
// matching no pattern are not covered.
func (m *middleware) match(r *http.Request) *route {
	if SafeMethod(r.Method) {
		return nil
	}
	r = m.matchRequest(r)
	if m.catchAll {
		return m.routes[0] // the default: one route for every request
	}
	if r.URL.RawPath == "" {
		for _, e := range m.exact {
			if e.method == r.Method && e.path == r.URL.Path {
				return m.routes[e.route]
			}
		}
	}
	// Match the cleaned path: ServeMux answers an unclean one with a
	// redirect handler, and "/api//charges" must not slip past a route.
	mr := r
	if p := cleanPath(r.URL.Path); p != r.URL.Path {
		mr = r.Clone(r.Context())
		mr.URL.Path = p
		mr.URL.RawPath = ""
	}
	h, _ := m.mux.Handler(mr)
	if i, ok := h.(routeMarker); ok {
		return m.routes[i]
	}
	return nil
}

// exactRoute is a route whose pattern is a method and a literal path
// ("POST /charges"). Without host patterns such a pattern is the most
// specific of any that match its method and path, so that a request naming
// them exactly is matched without the ServeMux, a noticeable part of
// what a replay costs (docs/bench/MIDDLEWARE.md).
type exactRoute struct {
	method, path string
	route        int
}

// exactRoutes returns the routes matched without the ServeMux, none when a
// pattern names a host (a host pattern wins over one without).
func exactRoutes(routes []*route) []exactRoute {
	var out []exactRoute
	for i, r := range routes {
		f := strings.Fields(r.Pattern)
		if len(f) == 1 && !strings.HasPrefix(f[0], "/") || len(f) == 2 && !strings.HasPrefix(f[1], "/") {
			return nil // a host
		}
		if len(f) == 2 && !strings.ContainsAny(f[1], "{%") && path.Clean(f[1]) == f[1] && !strings.HasSuffix(f[1], "/") {
			out = append(out, exactRoute{method: f[0], path: f[1], route: i})
		}
	}
	return out
}

func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	if c[0] != '/' {
		c = "/" + c
	}
	return c
}

// SafeMethod reports whether method is one the middleware passes through
// untouched (GET, HEAD, OPTIONS, TRACE): the methods that need no key.
func SafeMethod(method string) bool { return idemwire.SafeMethod(method) }
