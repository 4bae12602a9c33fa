package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// KeyMode says whether a route demands a key.
type KeyMode int

const (
	// KeyOptional: a request without a key passes through unprotected
	// (keys optional keep clients that send none working).
	KeyOptional KeyMode = iota
	// KeyRequired: a request without a key gets 400.
	KeyRequired
)

// Outcome classifies what the middleware did with a request.
type Outcome string

// The outcomes reported to Options.Observe.
const (
	OutcomePassThrough Outcome = "pass_through" // not covered: safe method, no route, or no key
	OutcomeExecuted    Outcome = "executed"     // the handler ran for a key
	OutcomeReplayed    Outcome = "replayed"     // a stored response was replayed
	OutcomeRejected    Outcome = "rejected"     // idem answered itself; Event.Kind says why
	OutcomeUnprotected Outcome = "unprotected"  // the store failed and the policy is fail open
	OutcomeUnrouted    Outcome = "unrouted"     // a keyed request that no route covers passed through
)

// Event describes one request, for metrics.
type Event struct {
	Route   string  // the pattern of the route that covered the request; "" for none
	Outcome Outcome // what the middleware did
	Kind    Kind    // set for OutcomeRejected
	Status  int     // the status the client got; 0 when it got none
}

// Options configures the middleware. The zero value of every field but the
// engine has a documented default.
type Options struct {
	// Routes are tried in ServeMux order (most specific pattern first).
	// Requests matching none pass through. nil means one route matching
	// every request, with the defaults.
	Routes []Route
	// RoutePath returns the path a request's route is matched on. nil
	// means the request's path. A middleware mounted under a router's
	// prefix sees the whole path ("/api/orders") while its routes may be
	// written as the mounted handler sees them ("POST /orders"): set
	// StripPrefix("/api"), or, under chi, a func returning
	// chi.RouteContext(r.Context()).RoutePath. A keyed request that no
	// route covers is logged (once per path) and reported as
	// OutcomeUnrouted, so that a route that is not protected is never
	// silent.
	RoutePath func(r *http.Request) string
	// Profile is the profile of routes that name none; nil means IETF().
	Profile *Profile
	// Tenant identifies the caller. nil means TenantCredentials: a hash of
	// every credential the request carries (CallerCredentialHeaders() and
	// the TLS client certificate, compared exactly but for the case of an
	// Authorization scheme), so that two callers never share a key; a
	// keyed request that carries none gets 401 tenant_required, unless
	// SharedAnonymousScope is set. TenantNone shares every key between all
	// callers on purpose. A TenantFunc that reports no tenant makes a
	// keyed request a 401.
	Tenant TenantFunc
	// SharedAnonymousScope puts the keyed requests that carry no
	// credential in one scope shared by all of them, instead of answering
	// them 401: for an API that identifies no caller, where any two
	// clients sending one key share its outcome. Only with the default
	// Tenant (New refuses it with another: ErrSharedAnonymousScope).
	SharedAnonymousScope bool
	// CredentialMAC keys the hash of credentials of the default tenant (nil
	// Tenant) and of TenantFromHeadersMAC. nil means SHA-256 with a domain
	// prefix. The tenant is part of a record's scope, so a MAC here must
	// not change while records live. What logs and trace spans print is
	// keyed separately, by the engine's idem.Redactor (idem.WithRedactor).
	CredentialMAC func(b []byte) string
	// MaxKeysPerTenant bounds the live records one tenant may create
	// through this middleware, so that one caller cannot fill the store
	// and deny every tenant new keys: past it, a keyed request with a key
	// that has no record gets 429 too_many_keys with Retry-After (when the
	// tenant's earliest record expires); retries of keys it holds are
	// answered as ever. Each record counts until the end of the minute its
	// TTL ends in, even if it was released before, and calls running
	// count too. The count is this
	// process's: gateways sharing a store each allow a tenant its cap, and
	// a restart forgets it. 0 means no bound.
	MaxKeysPerTenant int
	// MaxKeysAnonymous is MaxKeysPerTenant for the anonymous scope (the
	// tenant ""), shared by every caller without credentials, or by every
	// caller under TenantNone. 0 means MaxKeysPerTenant; negative, no
	// bound.
	MaxKeysAnonymous int
	// MaxBytesPerTenant bounds the bytes one tenant's live records hold
	// (the responses stored, plus 1 KiB a record for the rest), counted as
	// MaxKeysPerTenant is, and answered the same way. A tenant may pass it
	// by one response per call running at once. 0 means no bound.
	MaxBytesPerTenant int64
	// MaxRequestBytes bounds the body read before reserving a key; a larger
	// body gets 413. 0 means 10 MiB.
	MaxRequestBytes int64
	// BodyReadTimeout bounds the time to read a keyed request's body, which
	// is read before anything is reserved: a client that announces a body
	// and stalls gets 408 and its connection is closed, holding nothing.
	// 0 means 30 s; negative means no bound.
	BodyReadTimeout time.Duration
	// MaxResponseBytes bounds the body stored for replay; larger responses
	// pass through and a replay answers 409 response_not_stored. 0 means
	// 4 MiB.
	MaxResponseBytes int
	// ReplayHeaders are the response headers a replay repeats besides the
	// defaults:
	// Cache-Control, Content-Disposition, Content-Encoding,
	// Content-Language, Content-Location, Content-Type, ETag, Expires,
	// Last-Modified, Link, Location and Vary. Set-Cookie, Date and
	// rate-limit headers are not among them: a replay must not hand out a
	// session or stale limits. The credential headers (CredentialHeaders()) are refused, since a replay
	// would hand them to anyone holding the key, unless
	// AllowCredentialHeaders is set.
	ReplayHeaders []string
	// AllowCredentialHeaders lets ReplayHeaders name Set-Cookie,
	// Authorization or Proxy-Authorization: every retry with the key then
	// receives the first caller's session or credentials.
	AllowCredentialHeaders bool
	// RequestIDHeader carries the request ID; a request without one gets
	// a new one, which the handler sees. "" means X-Request-Id.
	RequestIDHeader string
	// Logger logs replays, conflicts and store errors, naming each call
	// by the hashes of its scope and key that the engine's idem.Redactor
	// prints (idem.WithRedactor), never by the raw key or tenant. nil
	// means slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called once per request that reached the
	// middleware with what it did.
	Observe func(r *http.Request, e Event)
	// TracerProvider makes the span of each keyed request (see the
	// package documentation's Tracing). nil means the global provider,
	// otel.GetTracerProvider(), which records nothing until a program
	// sets one; while the provider records nothing the middleware starts
	// no span at all.
	TracerProvider trace.TracerProvider
	// Propagators read the caller's trace context (W3C traceparent) from
	// a keyed request whose context carries no span yet. nil means the
	// global ones, otel.GetTextMapPropagator().
	Propagators propagation.TextMapPropagator
}

// CredentialHeaders returns the headers Options.ReplayHeaders refuses unless
// Options.AllowCredentialHeaders is set, in a new slice.
func CredentialHeaders() []string { return slices.Clone(credentialHeaders) }

// defaultReplayHeaders are the response headers a replay repeats besides
// Options.ReplayHeaders (listed in its comment).
var defaultReplayHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Location", "Content-Type", "ETag", "Expires", "Last-Modified", "Link",
	"Location", "Vary",
}

var credentialHeaders = []string{"Set-Cookie", "Authorization", "Proxy-Authorization"}

// ErrSharedAnonymousScope: Options.SharedAnonymousScope is set with a
// Tenant of its own, which decides itself who is anonymous.
var ErrSharedAnonymousScope = errors.New("idemhttp: SharedAnonymousScope applies to the default tenant only; a TenantFunc puts a caller in the anonymous scope by returning \"\", true")

// ErrCredentialHeader: Options.ReplayHeaders names a credential header.
var ErrCredentialHeader = errors.New("idemhttp: replay_headers names a credential header; a replay would hand it to anyone holding the key (set AllowCredentialHeaders to force it)")

// ErrFramingHeader: Options.ReplayHeaders names a header that frames the
// message or belongs to one connection (Content-Length, Transfer-Encoding,
// Connection, ...): a replay sets its own framing and never repeats them.
var ErrFramingHeader = errors.New("idemhttp: replay_headers names a header that frames the message or belongs to one connection; a replay sets its own (remove it)")

// replaySet returns the set of headers a replay repeats.
func (o *Options) replaySet() (map[string]bool, error) {
	replay := map[string]bool{}
	for _, h := range defaultReplayHeaders {
		replay[http.CanonicalHeaderKey(h)] = true
	}
	for _, h := range o.ReplayHeaders {
		c := http.CanonicalHeaderKey(h)
		for _, cred := range credentialHeaders {
			if c == cred && !o.AllowCredentialHeaders {
				return nil, fmt.Errorf("%w: %s", ErrCredentialHeader, c)
			}
		}
		if framing(c) {
			return nil, fmt.Errorf("%w: %s", ErrFramingHeader, c)
		}
		replay[c] = true
	}
	return replay, nil
}
