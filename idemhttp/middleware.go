package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"github.com/idem-dev/idem"
)

// Middleware returns net/http middleware that makes the requests it covers
// idempotent with eng. It panics if opts are invalid; use New to get an
// error instead.
func Middleware(eng *idem.Engine, opts Options) func(http.Handler) http.Handler {
	mw, err := New(eng, opts)
	if err != nil {
		panic(err)
	}
	return mw
}

// New returns the middleware, or an error if opts are invalid (a bad
// pattern, two routes with one pattern, an invalid policy, a credential
// header in ReplayHeaders).
func New(eng *idem.Engine, opts Options) (func(http.Handler) http.Handler, error) {
	rs, err := Compile(eng, opts)
	if err != nil {
		return nil, err
	}
	return rs.Wrap, nil
}

// Routes is the middleware's route table, compiled once. Tools that must
// take the same decisions outside a request (the gateway's admin API, `idem
// inspect`) use it to find a key's scope.
type Routes struct{ m *middleware }

type middleware struct {
	eng         *idem.Engine
	routes      []*route
	mux         *http.ServeMux
	tenant      TenantFunc
	former      bool                // the default tenant: formerScopes finds the caller's records of before
	formerMAC   func([]byte) string // the default tenant's hash: CredentialMAC, else HashCredential
	maxReq      int64
	bodyTimeout time.Duration
	maxResp     int
	replay      map[string]bool
	reqIDHeader string
	log         *slog.Logger
	observe     func(*http.Request, Event)
	catchAll    bool // one route, pattern "/": matching needs no ServeMux
	exact       []exactRoute
	variants    *http.ServeMux // the routes' patterns lower-cased (variant.go)
	trace       *tracing
	redact      idem.Redactor // the engine's: how logs and spans print scopes and keys
	limit       *limiter      // nil: no cap on a tenant's records
	routePath   func(*http.Request) string
	unrouted    unrouted
}

// Compile checks opts and compiles its routes.
func Compile(eng *idem.Engine, opts Options) (*Routes, error) {
	if eng == nil {
		return nil, errors.New("idemhttp: nil engine")
	}
	replay, err := opts.replaySet()
	if err != nil {
		return nil, err
	}
	m := &middleware{
		eng: eng, mux: http.NewServeMux(), tenant: opts.Tenant, replay: replay,
		maxReq: opts.MaxRequestBytes, bodyTimeout: opts.BodyReadTimeout, maxResp: opts.MaxResponseBytes,
		reqIDHeader: opts.RequestIDHeader, log: opts.Logger, observe: opts.Observe,
		routePath: opts.RoutePath,
	}
	if opts.SharedAnonymousScope && opts.Tenant != nil {
		return nil, ErrSharedAnonymousScope
	}
	m.withDefaults(opts.CredentialMAC, opts.SharedAnonymousScope)
	m.redact = eng.Redactor()
	m.limit = newLimiter(opts.MaxKeysPerTenant, opts.MaxKeysAnonymous, opts.MaxBytesPerTenant, eng.Now)
	m.trace = newTracing(opts.TracerProvider, opts.Propagators, m.redact)
	def := opts.Profile
	if def == nil {
		def = IETF()
	}
	routes := opts.Routes
	if routes == nil {
		routes = []Route{{}}
	}
	for i, rt := range routes {
		r, err := compileRoute(eng, rt, def)
		if err == nil {
			err = register(m.mux, r.Pattern, routeMarker(i))
		}
		if err != nil {
			return nil, fmt.Errorf("idemhttp: route %q: %w", rt.Pattern, err)
		}
		m.routes = append(m.routes, r)
	}
	m.catchAll = len(m.routes) == 1 && m.routes[0].Pattern == "/"
	m.exact = exactRoutes(m.routes)
	m.compileVariants()
	return &Routes{m: m}, nil
}

func (m *middleware) withDefaults(mac func([]byte) string, sharedAnonymous bool) {
	if m.maxReq <= 0 {
		m.maxReq = 10 << 20
	}
	if m.bodyTimeout == 0 {
		m.bodyTimeout = 30 * time.Second
	}
	if m.maxResp <= 0 {
		m.maxResp = 4 << 20
	}
	if m.reqIDHeader == "" {
		m.reqIDHeader = "X-Request-Id"
	}
	// Canonical once, so that handlerHeader need not on every request.
	m.reqIDHeader = textproto.CanonicalMIMEHeaderKey(m.reqIDHeader)
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.tenant == nil {
		// "" and sharedAnonymous without credentials: the anonymous scope.
		m.tenant = func(r *http.Request) (string, bool) {
			if t, ok := CredentialTenant(r.Header, r.TLS); ok {
				return t, true
			}
			return "", sharedAnonymous
		}
		m.former, m.formerMAC = true, HashCredential
		if mac != nil {
			m.tenant = func(r *http.Request) (string, bool) {
				if b := appendCredentialLines(nil, r.Header, r.TLS); b != nil {
					return "cred:" + mac(b), true
				}
				return "", sharedAnonymous
			}
			m.formerMAC = mac
		}
	}
}

// Wrap returns next behind the middleware.
func (rs *Routes) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rs.m.serve(next, w, r) })
}

// Match returns the compiled route that covers r, every decision filled
// in, or nil when r is not covered.
func (rs *Routes) Match(r *http.Request) *Route {
	if rt := rs.m.match(r); rt != nil {
		return &rt.Route
	}
	return nil
}

// Scope returns the scope a keyed request with method and target would
// use for the caller whose tenant is tenant (as the tenant function returns
// it; "" for the anonymous scope), and false when no route covers it.
func (rs *Routes) Scope(method, target, tenant string) (string, bool) {
	r, err := http.NewRequest(method, target, nil)
	if err != nil {
		return "", false
	}
	rt := rs.Match(r)
	if rt == nil {
		return "", false
	}
	return rt.Scope(r, tenant), true
}

func (m *middleware) replayHeader(name string) bool { return m.replay[name] }

// logAttrs names c in a log line at level as the engine's Redactor prints
// it (hashes; the raw scope and key only at Debug, when it allows them),
// followed by more.
func (m *middleware) logAttrs(level slog.Level, c idem.Call, more ...any) []any {
	return append(m.redact.LogAttrs(level, c.Scope, c.Key), more...)
}
