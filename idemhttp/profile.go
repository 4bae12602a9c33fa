package idemhttp

import (
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemwire"
)

// Scope says what, besides the tenant, separates keys.
type Scope int

const (
	// ScopeTenant: one key space per tenant. A key reused on another
	// endpoint is a key_reused conflict (the IETF draft, the workflow
	// admin).
	ScopeTenant Scope = iota
	// ScopeTenantEndpoint: one key space per tenant and endpoint (method and
	// path): the same key may be used on two endpoints (Stripe's API).
	ScopeTenantEndpoint
)

// Format returns the scope of a key: the tenant, with "%" and "|" escaped
// so that no tenant can pose as another scope, and for ScopeTenantEndpoint
// "|METHOD /path" after it ("alice|POST /charges"). It is the one place
// that knows the format; the admin API and `idem inspect` find scopes
// through it.
func (s Scope) Format(tenant, method, path string) string {
	t := escapeTenant(tenant)
	if s == ScopeTenantEndpoint {
		return t + "|" + method + " " + path
	}
	return t
}

func escapeTenant(t string) string {
	if !strings.ContainsAny(t, "%|") {
		return t
	}
	return strings.NewReplacer("%", "%25", "|", "%7C").Replace(t)
}

// Profile is a named bundle of behaviour: which policy, which responses are
// outcomes, which headers mark a replay, and the shape of errors. Routes
// pick one; the built-in ones are IETF, Stripe, Mobile and WorkflowAdmin.
type Profile struct {
	// Name names the profile in configuration files and logs.
	Name string
	// Policy is the engine policy of routes using the profile (TTL,
	// OnFailure, MaxKeyBytes, Wait...).
	Policy idem.Policy
	// Scope says what, besides the tenant, separates keys.
	Scope Scope
	// Cache reports whether a response status is an outcome to record and
	// replay; other statuses follow Policy.OnFailure. nil means 2xx and 409.
	Cache StatusSet
	// ReplayedHeader, when set, is sent on every keyed response with
	// "true" or "false" (Idempotent-Replayed).
	ReplayedHeader string
	// OriginalRequestIDHeader, when set, carries the first request's ID on
	// replays (Original-Request-Id).
	OriginalRequestIDHeader string
	// CachedHeader, when set, is sent as "true" on replays only (the Mobile
	// profile's X-Idempotency-Cached).
	CachedHeader string
	// BodyFlag, when set, is added to JSON object bodies as a boolean:
	// false on the first response, true on replays
	// ("idempotency_replayed").
	BodyFlag string
	// Status maps a kind of problem to its HTTP status; kinds not in the
	// map get DefaultStatus().
	Status map[Kind]int
	// WriteProblem writes idem's own answers. nil means WriteProblemJSON.
	WriteProblem func(w http.ResponseWriter, p *Problem)
}

// DefaultStatus returns the status of each kind of problem in the IETF
// profile, the status of a kind a profile's Status map leaves out, in a new
// map.
func DefaultStatus() map[Kind]int { return maps.Clone(defaultStatus) }

var defaultStatus = map[Kind]int{
	KindMissingKey:          http.StatusBadRequest,
	KindInvalidKey:          http.StatusBadRequest,
	KindMultipleKeys:        http.StatusBadRequest,
	KindTenantRequired:      http.StatusUnauthorized,
	KindPathVariant:         http.StatusBadRequest,
	KindRequestTooLarge:     http.StatusRequestEntityTooLarge,
	KindUnreadableBody:      http.StatusBadRequest,
	KindInProgress:          http.StatusConflict,
	KindPayloadMismatch:     http.StatusUnprocessableEntity,
	KindKeyReused:           http.StatusUnprocessableEntity,
	KindPreviousFailure:     http.StatusConflict,
	KindResponseNotStored:   http.StatusConflict,
	KindStoreUnavailable:    http.StatusServiceUnavailable,
	KindBodyTimeout:         http.StatusRequestTimeout,
	KindTooManyKeys:         http.StatusTooManyRequests,
	KindOutcomeUnknown:      http.StatusConflict,
	KindOutcomeNotRecorded:  http.StatusServiceUnavailable,
	KindUpstreamUnavailable: http.StatusBadGateway,
	KindUpstreamTimeout:     http.StatusGatewayTimeout,
	KindHeadersTooLarge:     http.StatusRequestHeaderFieldsTooLarge,
	KindMalformedRequest:    http.StatusBadRequest,
}

func (p *Profile) status(k Kind) int {
	if s, ok := p.Status[k]; ok {
		return s
	}
	return defaultStatus[k]
}

// IETF is the default profile: the IETF draft's 400, 409 and 422 with
// problem+json, Idempotent-Replayed and Original-Request-Id on responses,
// failures released so a retry runs again.
func IETF() *Profile {
	return &Profile{
		Name:                    "ietf",
		ReplayedHeader:          idemwire.ReplayedHeader,
		OriginalRequestIDHeader: "Original-Request-Id",
	}
}

// Stripe is the profile of Stripe's API: keys scoped by caller and endpoint,
// 409 while the first request runs (no waiting), Idempotent-Replayed and
// Original-Request-Id, 422 when the body differs. As in Stripe's API, every
// response the handler produced is an outcome, even a 500, except 429 (the
// request was not executed); set Cache to change that.
func Stripe() *Profile {
	p := IETF()
	p.Name = "stripe"
	p.Policy.Wait = idem.NoWait // said, so that an engine's wait does not reach it
	p.Scope = ScopeTenantEndpoint
	p.Cache = StatusSet{{100, 428}, {430, 599}}
	return p
}

// Mobile is the profile of an app API: keys scoped by user and endpoint,
// 2xx and 409 responses cached for 24 h, X-Idempotency-Cached: true on
// replays, and errors in a {"success": false, "error": {...}} envelope
// with 409 DUPLICATE_OPERATION on a payload mismatch. Its texts are the
// preset MobileTexts (German wording); for other texts,
// set WriteProblem to Envelope(yourTexts).
func Mobile() *Profile {
	return &Profile{
		Name:         "mobile",
		Policy:       idem.Policy{TTL: 24 * time.Hour},
		Scope:        ScopeTenantEndpoint,
		Cache:        StatusSet{{200, 299}, {409, 409}},
		CachedHeader: "X-Idempotency-Cached",
		Status: map[Kind]int{
			KindPayloadMismatch: http.StatusConflict,
			KindKeyReused:       http.StatusConflict,
		},
		WriteProblem: Envelope(MobileTexts()),
	}
}

// WorkflowAdmin is the profile of an admin API: keys of at most 200 bytes, bound to
// their action and target (a key reused on another endpoint or workflow is
// a conflict), every conflict a 409, a failed first call recorded and reported
// with its failure on retries, "idempotency_replayed" in JSON bodies, and
// records retained 7 days.
func WorkflowAdmin() *Profile {
	return &Profile{
		Name: "workflow-admin",
		Policy: idem.Policy{
			TTL:         7 * 24 * time.Hour,
			MaxKeyBytes: 200,
			OnFailure:   idem.OnFailureConflict,
		},
		Scope:    ScopeTenant,
		Cache:    StatusSet{{200, 299}},
		BodyFlag: "idempotency_replayed",
		Status: map[Kind]int{
			KindPayloadMismatch: http.StatusConflict,
			KindKeyReused:       http.StatusConflict,
		},
	}
}

// StatusSet is a set of HTTP statuses, as closed ranges.
type StatusSet [][2]int

// defaultCache is the set of outcomes of a route whose profile sets no
// Cache: 2xx, and 409, a deterministic answer.
var defaultCache = StatusSet{{200, 299}, {409, 409}}

// Contains reports whether status is in s.
func (s StatusSet) Contains(status int) bool {
	for _, r := range s {
		if status >= r[0] && status <= r[1] {
			return true
		}
	}
	return false
}
