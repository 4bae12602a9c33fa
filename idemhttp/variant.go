package idemhttp

import (
	"net/http"
	"net/url"
	"strings"
)

// Path variants. Many frameworks route /charges/, /Charges, /charges%2F and
// /charges;jsessionid=x to the handler of /charges, while a route's
// pattern, matched as net/http's ServeMux matches it, covers none of them:
// a client (or an attacker) sending a variant would pass the route
// unprotected, a key-less request would pass a route whose key is
// required. So a non-safe request that no route covers as written, whose
// path normalised (variantPath) falls under a route's pattern normalised
// the same way, is refused with 400 path_variant naming the route, when it
// carries a key or the route requires one. A route for the variant itself
// wins: it covers the request as written. A key-less request on a variant
// of a route whose key is optional passes through, as it would on the
// route itself.

// compileVariants registers every route's pattern, its path lower-cased,
// in m.variants. A pattern that lower-cases into another's (or into one
// with two wildcards of one name) keeps only its exact form.
func (m *middleware) compileVariants() {
	m.variants = http.NewServeMux()
	for i, r := range m.routes {
		p := r.Pattern
		at := strings.IndexByte(p, '/')
		if at < 0 {
			continue
		}
		_ = register(m.variants, p[:at]+strings.ToLower(p[at:]), routeMarker(i))
	}
}

// variant returns the route r's path is a variant of, or nil; match found
// no route for r as written.
func (m *middleware) variant(r *http.Request) *route {
	if m.catchAll || SafeMethod(r.Method) {
		return nil
	}
	r = m.matchRequest(r) // the path as the routes see it (Options.RoutePath)
	p, ok := variantPath(r.URL)
	if !ok {
		return nil
	}
	mr, u := *r, *r.URL // the mux reads the method, host and path alone
	u.Path, u.RawPath = p, ""
	mr.URL = &u
	h, _ := m.variants.Handler(&mr)
	if i, ok := h.(routeMarker); ok {
		return m.routes[i]
	}
	return nil
}

// variantPath returns u's path normalised: ";parameters" cut from every
// segment, %2F decoded, lower-cased, cleaned, the trailing slash removed;
// false when that is the path as it is (no variant).
func variantPath(u *url.URL) (string, bool) {
	raw := u.EscapedPath()
	plain := true
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c == ';' || c == '%' || 'A' <= c && c <= 'Z' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain && (len(raw) <= 1 || raw[len(raw)-1] != '/') {
		return "", false // nothing to normalise: the cheap answer for most requests
	}
	segs := strings.Split(raw, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ';'); j >= 0 {
			s = s[:j]
		}
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "%2F", "/"), "%2f", "/")
	}
	p, err := url.PathUnescape(strings.Join(segs, "/"))
	if err != nil {
		return "", false
	}
	p = cleanPath(strings.ToLower(p))
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	return p, p != u.Path
}

// refuseVariant answers a request on a variant of rt's path: 400
// path_variant, in rt's shape, when it carries a key or rt requires one.
// It reports false, answering nothing, when the request may pass.
func (m *middleware) refuseVariant(w http.ResponseWriter, r *http.Request, rt *route) (Event, bool) {
	_, keyed := r.Header[HeaderName]
	if !keyed && rt.Key != KeyRequired {
		return Event{}, false
	}
	send := "send it to the route's path exactly as the route writes it"
	if f := strings.Fields(rt.Pattern); len(f) > 0 && !strings.ContainsAny(f[len(f)-1], "{") && strings.HasPrefix(f[len(f)-1], "/") {
		send = "send it to " + f[len(f)-1]
	}
	p := &Problem{Kind: KindPathVariant, Detail: "the path " + printable(r.URL.EscapedPath()) + " is a variant of the protected route " + rt.Pattern +
		" (it differs by case, a trailing slash, an encoded slash or ;parameters) and no route covers it as written: " + send}
	rt.WriteProblem(w, p)
	return Event{Route: rt.Pattern, Outcome: OutcomeRejected, Kind: p.Kind, Status: p.Status}, true
}
