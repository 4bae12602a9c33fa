package idemhttp

import (
	"net/http"
	"strings"
	"sync"
)

// StripPrefix returns an Options.RoutePath for a middleware mounted under
// prefix ("/api"): its routes are written as the mounted handler sees
// them ("POST /orders" for /api/orders). A path without the prefix is
// matched as it is.
func StripPrefix(prefix string) func(*http.Request) string {
	prefix = strings.TrimSuffix(prefix, "/")
	return func(r *http.Request) string {
		p, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || (p != "" && p[0] != '/') {
			return r.URL.Path
		}
		if p == "" {
			return "/"
		}
		return p
	}
}

// matchRequest is the request m's routes are matched against: r, or a
// copy whose path is Options.RoutePath's.
func (m *middleware) matchRequest(r *http.Request) *http.Request {
	if m.routePath == nil {
		return r
	}
	p := m.routePath(r)
	if p == "" || p == r.URL.Path {
		return r
	}
	mr := new(http.Request)
	*mr = *r
	u := *r.URL
	u.Path, u.RawPath = p, ""
	mr.URL = &u
	return mr
}

// maxUnrouted bounds the paths whose first unrouted keyed request is
// logged; past it, such requests are only counted.
const maxUnrouted = 1024

// unrouted remembers the paths of keyed requests that no route covered.
type unrouted struct {
	mu   sync.Mutex
	seen map[string]struct{} // guarded by mu
}

// unprotected notes a keyed request with a method that changes things
// which no route covers: it passes through without protection, which a
// route written for another mount point (a router's prefix) does
// silently. The first of each path is logged, every one is reported
// (OutcomeUnrouted).
func (m *middleware) unprotected(r *http.Request) {
	id := r.Method + " " + r.URL.Path
	u := &m.unrouted
	u.mu.Lock()
	_, seen := u.seen[id]
	if !seen && len(u.seen) < maxUnrouted {
		if u.seen == nil {
			u.seen = map[string]struct{}{}
		}
		u.seen[id] = struct{}{}
	} else {
		seen = true
	}
	u.mu.Unlock()
	if !seen {
		m.log.Warn("idem: a keyed request matches no route and passed through without protection; "+
			"if the middleware is mounted under a prefix, set Options.RoutePath (idemhttp.StripPrefix)",
			"method", r.Method, "path", r.URL.Path)
	}
	m.report(r, Event{Outcome: OutcomeUnrouted})
}
