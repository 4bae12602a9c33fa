package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
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

// TenantAuthorization takes the tenant from a hash of the Authorization
// header (see TenantFromHeaders); a request without one gets 401.
func TenantAuthorization() TenantFunc {
	from := TenantFromHeaders("Authorization")
	return func(r *http.Request) (string, bool) {
		if strings.TrimSpace(r.Header.Get("Authorization")) == "" {
			return "", false
		}
		return from(r)
	}
}

// TenantFromHeaders takes the tenant from a hash of the named headers
// together (say Authorization and Stripe-Account), so that callers with
// different credentials never share a key and no credential is stored. The
// Authorization and Proxy-Authorization schemes are compared without case
// and white space ("Bearer T" is "bearer  T"). A request without any of
// the headers is in the anonymous scope. The hash is SHA-256 with a domain
// prefix; TenantFromHeadersMAC keys it.
func TenantFromHeaders(names ...string) TenantFunc { return TenantFromHeadersMAC(nil, names...) }

// TenantFromHeadersMAC is TenantFromHeaders with the hash keyed by mac (the
// gateway's secret); nil mac means SHA-256 with a domain prefix.
func TenantFromHeadersMAC(mac func(b []byte) string, names ...string) TenantFunc {
	if mac == nil {
		mac = HashCredential
	}
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	return func(r *http.Request) (string, bool) {
		var b []byte
		for _, n := range canon {
			vs := r.Header.Values(n)
			for _, v := range vs {
				if v = normalizeCredential(n, v); v != "" {
					b = append(append(append(append(b, n...), ':'), v...), '\n')
				}
			}
		}
		if b == nil {
			return "", true // the anonymous scope
		}
		return "cred:" + mac(b), true
	}
}

// HashCredential is the default credential hash: SHA-256 with a domain
// prefix, the first 128 bits in hex.
func HashCredential(b []byte) string {
	h := sha256.New()
	h.Write([]byte("idem tenant credentials v1\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// normalizeCredential trims v and, for the authorization headers, lowers the
// scheme's case and folds the white space after it (RFC 9110 section 11.1:
// the scheme is case-insensitive).
func normalizeCredential(name, v string) string {
	v = strings.TrimSpace(v)
	if name != "Authorization" && name != "Proxy-Authorization" {
		return v
	}
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok {
		scheme, rest, ok = strings.Cut(v, "\t")
	}
	if !ok {
		return strings.ToLower(v)
	}
	return strings.ToLower(scheme) + " " + strings.TrimSpace(rest)
}
