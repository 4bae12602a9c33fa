package idemhttp

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// TenantFunc returns the caller's identity, and false when the request
// carries none; a keyed request without a tenant is answered 401. The
// tenant "" is the anonymous scope.
type TenantFunc func(r *http.Request) (string, bool)

// TenantNone puts every caller in one scope: two callers with one key share
// its outcome. Only for APIs whose keys are shared on purpose.
func TenantNone(*http.Request) (string, bool) { return "", true }

// TenantHeader takes the tenant from a request header, such as X-User-ID or
// X-Organization-ID, set by an authenticating proxy in front of idem.
func TenantHeader(name string) TenantFunc {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Values(name)
		if len(v) != 1 {
			return "", false
		}
		t := strings.TrimSpace(v[0])
		return t, t != ""
	}
}

// CallerCredentialHeaders returns the request headers the default tenant
// (TenantCredentials) takes a caller's identity from, in a new slice: the
// HTTP authentication headers, cookies, and the API-key headers in common
// use. Besides them it takes the TLS client certificate.
func CallerCredentialHeaders() []string { return slices.Clone(callerCredentialHeaders) }

// callerCredentialHeaders is the one list of what the default tenant reads,
// in the order it hashes them. Authorization comes first, so that a request
// carrying only Authorization keeps the scope it had when the default read
// nothing else.
var callerCredentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token",
	"X-Goog-Api-Key", "Ocp-Apim-Subscription-Key",
}

// CredentialTenant is the default tenant's rule: a hash of every credential
// the request carries, the values of CallerCredentialHeaders() and the TLS
// client certificate (cs is the connection's TLS state, nil without TLS),
// and false when it carries none. Credentials are compared exactly: only the
// name of an Authorization or Proxy-Authorization scheme is compared without
// case, with the white space after it folded ("Bearer T" is "bearer  T",
// but "TOKEN" is not "token"). Two callers whose credentials differ in any
// byte never share a key; a caller whose cookies change between retries
// (an analytics cookie) is a new caller for its retry, which then runs
// again: scope such APIs by their session cookie (TenantFrom with a
// Cookie source). Other transports (gRPC metadata) reuse it, with h's keys
// in canonical form (http.CanonicalHeaderKey), as net/http makes them.
func CredentialTenant(h http.Header, cs *tls.ConnectionState) (string, bool) {
	// Every keyed request of the default tenant comes here: its lines are
	// made on the stack for most requests, and the tenant is the one
	// allocation.
	var stack [512]byte
	b := appendCredentialLines(stack[:0], h, cs)
	if len(b) == 0 {
		return "", false
	}
	sum := credentialSum(b)
	var out [len("cred:") + 32]byte
	hex.Encode(out[copy(out[:], "cred:"):], sum[:16])
	return string(out[:]), true
}

// appendCredentialLines appends what CredentialTenant hashes to b: a line
// per credential, none when the request carries none.
func appendCredentialLines(b []byte, h http.Header, cs *tls.ConnectionState) []byte {
	for _, n := range callerCredentialHeaders {
		b = appendHeader(b, h, n)
	}
	if cs != nil && len(cs.PeerCertificates) > 0 {
		// A name with a space is no header's: no header line is this one.
		sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
		b = append(b, "TLS client certificate:"...)
		b = hex.AppendEncode(b, sum[:])
		b = append(b, '\n')
	}
	return b
}

// TenantCredentials is CredentialTenant of the request: the default tenant
// (nil Options.Tenant, without Options.CredentialMAC). A keyed request
// that carries no credential gets 401, unless Options.SharedAnonymousScope
// puts it in the anonymous scope.
func TenantCredentials(r *http.Request) (string, bool) { return CredentialTenant(r.Header, r.TLS) }

// TenantFromHeaders takes the tenant from a hash of the named headers
// together (say Authorization and Stripe-Account), so that callers with
// different credentials never share a key and no credential is stored.
// Every header is required: a request without one of them gets 401, never
// a scope made of the others. Values are compared exactly but for the
// Authorization and Proxy-Authorization schemes (see CredentialTenant).
// TenantFrom makes sources optional or takes a cookie.
func TenantFromHeaders(names ...string) TenantFunc { return TenantFromHeadersMAC(nil, names...) }

// TenantFromHeadersMAC is TenantFromHeaders with the hash made by mac; nil
// mac means HashCredential. A tenant is part of the identity of the
// records written under it: a mac whose key changes (a rotated secret)
// loses every record.
func TenantFromHeadersMAC(mac func(b []byte) string, names ...string) TenantFunc {
	sources := make([]TenantSource, len(names))
	for i, n := range names {
		sources[i] = TenantSource{Header: n}
	}
	f, err := tenantFrom(mac, sources)
	if err != nil {
		return func(*http.Request) (string, bool) { return "", false }
	}
	return f
}

// TenantSource is one source of a caller's identity for TenantFrom: a
// header or a cookie.
type TenantSource struct {
	// Header names a request header (Authorization, X-User-ID,
	// Stripe-Account).
	Header string
	// Cookie, instead of Header, names a cookie (the session's): only its
	// value counts, so that cookies that change between retries (analytics)
	// do not make a retry a new caller.
	Cookie string
	// Optional lets a request without this source be identified by the
	// others (Stripe-Account: a platform acting for itself sends none). A
	// request without a required source gets 401.
	Optional bool
}

// ErrTenantSources: TenantFrom's sources cannot identify a caller.
var ErrTenantSources = errors.New("idemhttp: tenant sources")

// TenantFrom takes the tenant from a hash of the sources together (never
// the values as they are: a stored scope holds no credential). A keyed
// request that lacks a required source gets 401, never a scope made of the
// others or the anonymous scope. It returns an error wrapping
// ErrTenantSources when a source names neither or both a header and a
// cookie, or when no source is required.
func TenantFrom(sources ...TenantSource) (TenantFunc, error) { return tenantFrom(nil, sources) }

func tenantFrom(mac func([]byte) string, sources []TenantSource) (TenantFunc, error) {
	if mac == nil {
		mac = HashCredential
	}
	required := false
	srcs := make([]TenantSource, len(sources))
	for i, s := range sources {
		switch {
		case (s.Header == "") == (s.Cookie == ""):
			return nil, errors.Join(ErrTenantSources, errors.New("a source names a header or a cookie"))
		case s.Header != "":
			s.Header = http.CanonicalHeaderKey(s.Header)
		}
		required = required || !s.Optional
		srcs[i] = s
	}
	if !required {
		return nil, errors.Join(ErrTenantSources, errors.New("at least one source must be required: a request with none of them would share one scope"))
	}
	return func(r *http.Request) (string, bool) {
		var b []byte
		for _, s := range srcs {
			n := len(b)
			if s.Header != "" {
				b = appendHeader(b, r.Header, s.Header)
			} else {
				b = appendCookie(b, r, s.Cookie)
			}
			if len(b) == n && !s.Optional {
				return "", false
			}
		}
		return "cred:" + mac(b), true
	}, nil
}

// appendHeader appends a line "Name:value\n" per non-empty value of the
// header name (canonical) to b. Values cannot hold a line break (net/http
// refuses them), so that the lines of two requests are the same only when
// their values are. An authorization value without a scheme is
// "Name;no-scheme:value\n": earlier versions lower-cased such a value whole,
// and the scope so made was shared by every caller whose credential differs
// only in case; with the mark, no such credential is ever given that scope
// again (no header's name holds ';'). h's keys are canonical, as net/http
// makes them.
func appendHeader(b []byte, h http.Header, name string) []byte {
	for _, v := range h[name] {
		scheme, v, schemeless := normalizeCredential(name, v)
		if scheme == "" && v == "" {
			continue
		}
		b = append(b, name...)
		if schemeless {
			b = append(b, ";no-scheme"...)
		}
		b = append(b, ':')
		if scheme != "" {
			b = append(appendLower(b, scheme), ' ')
		}
		b = append(append(b, v...), '\n')
	}
	return b
}

// appendLower appends s to b with ASCII letters lower-cased (an auth
// scheme is a token: ASCII only), without a string of its own.
func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// appendCookie appends a line "Cookie NAME:value\n" per cookie named name;
// with the space, no header's line is one.
func appendCookie(b []byte, r *http.Request, name string) []byte {
	for _, c := range r.CookiesNamed(name) {
		if c.Value != "" {
			b = append(append(append(append(append(b, "Cookie "...), name...), ':'), c.Value...), '\n')
		}
	}
	return b
}

// HashCredential is the hash of a caller's credentials that tenants are
// made of: SHA-256 with a domain prefix, the first 128 bits in hex. It is
// not keyed by a secret, on purpose: a tenant is part of the identity of
// every record written under it, which must stay the same across gateways,
// restarts and a rotated secret. The hash is never stored raw where a
// secret is set (the store seals it); where it is printed, the printer
// keys it.
func HashCredential(b []byte) string {
	sum := credentialSum(b)
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return string(out[:]) // the one allocation
}

// credentialSum is the SHA-256 that HashCredential takes the first half
// of, with its domain prefix in a buffer on the stack for most requests.
func credentialSum(b []byte) [sha256.Size]byte {
	const domain = "idem tenant credentials v1\x00"
	var stack [512]byte
	return sha256.Sum256(append(append(stack[:0], domain...), b...))
}

// normalizeCredential trims v and, for the authorization headers, lowers the
// scheme's case and folds the white space after it (RFC 9110 section 11.1:
// the scheme is case-insensitive). A value without a scheme (a token alone,
// or one whose first word is not a token) is kept as it is, and reported.
//
// The scheme is returned apart (scheme, as it is; the caller lowers it), so
// that no string is built per request: the credential is "scheme rest", or
// rest alone when scheme is empty.
func normalizeCredential(name, v string) (scheme, rest string, schemeless bool) {
	v = strings.TrimSpace(v)
	if name != "Authorization" && name != "Proxy-Authorization" {
		return "", v, false
	}
	i := strings.IndexAny(v, " \t")
	if i <= 0 || !isToken(v[:i]) {
		return "", v, true
	}
	return v[:i], strings.TrimSpace(v[i+1:]), false
}

// isToken reports whether s is an RFC 9110 token, as an auth scheme is.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return s != ""
}

// formerScopes returns the scopes other than scope (the call's) that the
// default tenant gave this request before it read more than Authorization
// (formerLines), formatted as the route formats scopes: the engine reads
// the records written there as the call's (idem.Call.FormerScopes).
func (x *exchange) formerScopes(scope string) []string {
	h := x.r.Header
	if x.r.TLS == nil || len(x.r.TLS.PeerCertificates) == 0 {
		// Most requests carry Authorization alone: their tenant is the
		// same as it was, and costs nothing more to know it.
		other := false
		for _, n := range callerCredentialHeaders[1:] {
			if len(h[n]) > 0 {
				other = true
				break
			}
		}
		if !other {
			return nil
		}
	}
	old, ok := formerLines(h)
	if !ok || bytes.Equal(old, appendCredentialLines(nil, h, x.r.TLS)) {
		return nil
	}
	if s := x.rt.Scope(x.r, "cred:"+x.m.formerMAC(old)); s != scope {
		return []string{s}
	}
	return nil
}

// formerLines is what the default tenant hashed before it read more than
// Authorization: a line per Authorization value, lower-cased whole when it had no
// scheme. It reports true only when that tenant was the caller's alone: at
// least one value, and every one with a scheme (the lower-cased ones were
// shared by every caller whose token differs only in case; the request
// without Authorization was in the anonymous scope). Records written under
// it are still this caller's. For such values the lines are those
// CredentialTenant makes of Authorization.
func formerLines(h http.Header) ([]byte, bool) {
	var b []byte
	for _, v := range h.Values("Authorization") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		// As it was cut: at the first space, else at the first tab.
		scheme, rest, ok := strings.Cut(v, " ")
		if !ok {
			scheme, rest, ok = strings.Cut(v, "\t")
		}
		if !ok || !isToken(scheme) {
			return nil, false
		}
		b = append(append(append(append(append(b, "Authorization:"...), strings.ToLower(scheme)...), ' '), strings.TrimSpace(rest)...), '\n')
	}
	return b, b != nil
}
