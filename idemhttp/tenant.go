package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// TenantFunc returns the caller's identity, and false when the request
// carries none. A keyed request without a tenant is answered 401: keys are
// never shared in an anonymous scope.
type TenantFunc func(r *http.Request) (string, bool)

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

// TenantAuthorization takes the tenant from a SHA-256 of the Authorization
// header, so that two API keys or tokens never share keys, and no secret is
// stored.
func TenantAuthorization() TenantFunc {
	return func(r *http.Request) (string, bool) {
		a := strings.TrimSpace(r.Header.Get("Authorization"))
		if a == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(a))
		return "auth:" + hex.EncodeToString(sum[:16]), true
	}
}
