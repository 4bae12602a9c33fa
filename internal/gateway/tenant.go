package gateway

import (
	"net/http"
	"strings"

	"github.com/idem-dev/idem/idemhttp"
)

// TenantSource is one place the gateway takes a caller's identity from.
type TenantSource struct {
	// Header names a header set by an authenticating proxy in front of
	// the gateway (X-User-ID).
	Header string
	// Authorization, instead of Header, takes the caller's Authorization
	// header, never stored as it is: a keyed hash of it.
	Authorization bool
}

// Tenant returns how the gateway picks the tenant of a keyed request, the
// scope its keys live in, and a description of that for the start-up log:
//
//   - none: every caller shares every key, on purpose;
//   - no sources: a keyed hash (mac) of the caller's Authorization header;
//     a request without one is in the anonymous scope;
//   - one Header: that header as it is; a request without it gets 401;
//   - Authorization alone: its keyed hash; a request without it gets 401;
//   - several: a keyed hash of them together; a request with none of them
//     is in the anonymous scope.
func Tenant(none bool, sources []TenantSource, mac func([]byte) string) (idemhttp.TenantFunc, string) {
	switch {
	case none:
		return idemhttp.TenantNone, "none: every caller shares every key"
	case len(sources) == 0:
		return idemhttp.TenantFromHeadersMAC(mac, "Authorization"),
			"keyed hash of Authorization (default; requests without it share the anonymous scope)"
	case len(sources) == 1 && !sources[0].Authorization:
		return idemhttp.TenantHeader(sources[0].Header), "header " + sources[0].Header
	}
	var names []string
	for _, s := range sources {
		if s.Authorization {
			names = append(names, "Authorization")
		} else {
			names = append(names, s.Header)
		}
	}
	from := idemhttp.TenantFromHeadersMAC(mac, names...)
	desc := "keyed hash of " + strings.Join(names, " + ")
	if len(names) > 1 {
		return from, desc
	}
	// Authorization alone: a request without credentials gets 401.
	return func(r *http.Request) (string, bool) {
		if strings.TrimSpace(r.Header.Get("Authorization")) == "" {
			return "", false
		}
		return from(r)
	}, desc + " (required)"
}
