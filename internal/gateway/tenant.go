package gateway

import (
	"strings"

	"github.com/idem-dev/idem/idemhttp"
)

// TenantSource is one place the gateway takes a caller's identity from.
type TenantSource struct {
	// Header names a header set by an authenticating proxy in front of
	// the gateway (X-User-ID).
	Header string
	// Authorization, instead of Header, takes the caller's Authorization
	// header, never stored as it is: a hash of it.
	Authorization bool
	// Cookie, instead of Header, names the caller's session cookie, never
	// stored as it is: a hash of its value.
	Cookie string
	// Optional: a request without this source is identified by the others
	// (at least one source is required).
	Optional bool
}

// Tenant returns how the gateway picks the tenant of a keyed request, the
// scope its keys live in, and a description of that for the start-up log:
//
//   - none: every caller shares every key, on purpose;
//   - no sources: nil, the middleware's default (idemhttp.TenantCredentials:
//     a hash of every credential the request carries); a keyed request
//     with none gets 401, unless sharedAnonymous (anonymous: shared) puts
//     it in one scope shared by all such requests;
//   - one Header: that header as it is; a request without it gets 401;
//   - otherwise: a hash of the sources together (idemhttp.TenantFrom); a
//     request without a required source gets 401, never a scope made of
//     the others.
//
// The hash is idemhttp.HashCredential, never keyed by the secret: a tenant
// is part of the identity of its records, the same on every gateway and
// after a rotation.
func Tenant(none bool, sources []TenantSource, sharedAnonymous bool) (idemhttp.TenantFunc, string, error) {
	switch {
	case none:
		return idemhttp.TenantNone, "none: every caller shares every key", nil
	case len(sources) == 0 && sharedAnonymous:
		return nil, "hash of every credential (" + credentials() + "; default); " +
			"keyed requests with none share one anonymous scope (anonymous: shared)", nil
	case len(sources) == 0:
		return nil, "hash of every credential (" + credentials() + "; default); " +
			"a keyed request with none gets 401", nil
	case len(sources) == 1 && sources[0].Header != "" && !sources[0].Optional:
		return idemhttp.TenantHeader(sources[0].Header), "header " + sources[0].Header + "; a keyed request without it gets 401", nil
	}
	var names []string
	src := make([]idemhttp.TenantSource, len(sources))
	for i, s := range sources {
		src[i] = idemhttp.TenantSource{Header: s.Header, Cookie: s.Cookie, Optional: s.Optional}
		name := s.Header
		switch {
		case s.Authorization:
			src[i].Header, name = "Authorization", "Authorization"
		case s.Cookie != "":
			name = "cookie " + s.Cookie
		}
		if s.Optional {
			name += " (optional)"
		}
		names = append(names, name)
	}
	f, err := idemhttp.TenantFrom(src...)
	if err != nil {
		return nil, "", err
	}
	return f, "hash of " + strings.Join(names, " + ") + "; a keyed request without a required one gets 401", nil
}

// credentials lists what the default tenant reads, for the start-up log.
func credentials() string {
	return strings.Join(idemhttp.CallerCredentialHeaders(), ", ") + ", the TLS client certificate"
}
