package idemhttp

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/idem-dev/idem"
)

// KeyMode says whether a route demands a key.
type KeyMode int

const (
	// KeyOptional: a request without a key passes through unprotected
	// (seed 003 keeps keys optional so old clients keep working).
	KeyOptional KeyMode = iota
	// KeyRequired: a request without a key gets 400.
	KeyRequired
)

// FingerprintMode says what makes two requests with one key the same.
type FingerprintMode int

const (
	// FingerprintBody: method, target and body; JSON bodies canonicalized
	// so that member order and white space do not matter.
	FingerprintBody FingerprintMode = iota
	// FingerprintNone: no check; any request with the key replays the
	// first outcome (seed 001's endpoints without payload check).
	FingerprintNone
	// FingerprintFields: method, target and the chosen JSON fields.
	FingerprintFields
)

// Route is the policy of the requests matching Pattern.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("POST /charges",
	// "POST /api/funnels/{slug}/assessments/{id}/answers/save"). Empty
	// matches every request.
	Pattern     string
	Key         KeyMode
	Fingerprint FingerprintMode
	// Fields are the JSON fields of FingerprintFields ("stepId",
	// "customer.id").
	Fields []string
	// Profile is the route's profile; nil means Options.Profile.
	Profile *Profile
	// Policy, when not nil, is the route's whole policy. When nil, the
	// route takes the engine's policy with the profile's non-zero fields
	// laid over it.
	Policy *idem.Policy
	// Cache, when not nil, replaces the profile's set of outcome statuses.
	Cache StatusSet
}

// Outcome classifies what the middleware did with a request.
type Outcome string

// The outcomes reported to Options.Observe.
const (
	OutcomePassThrough Outcome = "pass_through" // not covered: safe method, no route, or no key
	OutcomeExecuted    Outcome = "executed"     // the handler ran for a key
	OutcomeReplayed    Outcome = "replayed"     // a stored response was replayed
	OutcomeRejected    Outcome = "rejected"     // idem answered itself; Event.Kind says why
	OutcomeUnprotected Outcome = "unprotected"  // the store failed and the policy is fail open
)

// Event describes one request, for metrics.
type Event struct {
	Route   string
	Outcome Outcome
	Kind    Kind // set for OutcomeRejected
	Status  int
}

// Options configures the middleware. The zero value of every field but the
// engine has a documented default.
type Options struct {
	// Routes are tried in ServeMux order (most specific pattern first).
	// Requests matching none pass through. nil means one route matching
	// every request, with the defaults.
	Routes []Route
	// Profile is the profile of routes that name none; nil means IETF().
	Profile *Profile
	// Tenant identifies the caller; nil means a single tenant. When set, a
	// keyed request without a tenant gets 401.
	Tenant TenantFunc
	// MaxRequestBytes bounds the body read for fingerprints; a larger body
	// gets 413. 0 means 10 MiB.
	MaxRequestBytes int64
	// MaxResponseBytes bounds the body kept for replay; larger responses
	// pass through and a replay answers 409 response_not_stored. 0 means
	// 4 MiB.
	MaxResponseBytes int
	// KeepHeaders are kept for replay besides DefaultKeepHeaders.
	KeepHeaders []string
	// RequestIDHeader carries the request ID; a request without one gets
	// a new one, which the handler sees. "" means X-Request-Id.
	RequestIDHeader string
	// Logger logs replays, conflicts and store errors. nil means
	// slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called once per request that reached the
	// middleware with what it did.
	Observe func(r *http.Request, e Event)
}

// DefaultKeepHeaders are the response headers a replay repeats. Set-Cookie,
// Date and rate-limit headers are not among them: a replay must not hand
// out a session or stale limits.
var DefaultKeepHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Location", "Content-Type", "ETag", "Expires", "Last-Modified", "Link",
	"Location", "Vary",
}

type route struct {
	Route
	pattern string
	profile *Profile
	eng     *idem.Engine
	outcome StatusSet // the statuses recorded as outcomes: Route.Cache, else the profile's, else DefaultCache
}

type middleware struct {
	eng         *idem.Engine
	routes      []*route
	mux         *http.ServeMux
	tenant      TenantFunc
	maxReq      int64
	maxResp     int
	keep        map[string]bool
	reqIDHeader string
	log         *slog.Logger
	observe     func(*http.Request, Event)
}

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
// pattern, two routes with one pattern, an invalid policy).
func New(eng *idem.Engine, opts Options) (func(http.Handler) http.Handler, error) {
	if eng == nil {
		return nil, errors.New("idemhttp: nil engine")
	}
	m := &middleware{
		eng:         eng,
		mux:         http.NewServeMux(),
		tenant:      opts.Tenant,
		maxReq:      opts.MaxRequestBytes,
		maxResp:     opts.MaxResponseBytes,
		keep:        map[string]bool{},
		reqIDHeader: opts.RequestIDHeader,
		log:         opts.Logger,
		observe:     opts.Observe,
	}
	if m.maxReq <= 0 {
		m.maxReq = 10 << 20
	}
	if m.maxResp <= 0 {
		m.maxResp = 4 << 20
	}
	if m.reqIDHeader == "" {
		m.reqIDHeader = "X-Request-Id"
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	for _, h := range append(append([]string(nil), DefaultKeepHeaders...), opts.KeepHeaders...) {
		m.keep[http.CanonicalHeaderKey(h)] = true
	}
	def := opts.Profile
	if def == nil {
		def = IETF()
	}
	routes := opts.Routes
	if routes == nil {
		routes = []Route{{}}
	}
	for i, rt := range routes {
		r := &route{Route: rt, pattern: rt.Pattern, profile: rt.Profile}
		if r.profile == nil {
			r.profile = def
		}
		if r.pattern == "" {
			r.pattern = "/"
		}
		switch {
		case rt.Cache != nil:
			r.outcome = rt.Cache
		case r.profile.Cache != nil:
			r.outcome = r.profile.Cache
		default:
			r.outcome = DefaultCache
		}
		pol := eng.Policy().Overlay(r.profile.Policy)
		if rt.Policy != nil {
			pol = *rt.Policy
		}
		if err := pol.WithDefaults().Validate(); err != nil {
			return nil, fmt.Errorf("idemhttp: route %q: %w", rt.Pattern, err)
		}
		if rt.Fingerprint == FingerprintFields && len(rt.Fields) == 0 {
			return nil, fmt.Errorf("idemhttp: route %q: fingerprint by fields, but no fields", rt.Pattern)
		}
		r.eng = eng.WithPolicy(pol)
		if err := register(m.mux, r.pattern, routeMarker(i)); err != nil {
			return nil, fmt.Errorf("idemhttp: route %q: %w", rt.Pattern, err)
		}
		m.routes = append(m.routes, r)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}, nil
}

// routeMarker is registered in the ServeMux only to learn which route a
// request matches: matching uses the standard library's pattern rules.
type routeMarker int

func (routeMarker) ServeHTTP(http.ResponseWriter, *http.Request) {}

func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (m *middleware) match(r *http.Request) *route {
	// Match the cleaned path: ServeMux answers an unclean one with a
	// redirect handler, and "/api//charges" must not slip past a route.
	mr := r
	if p := cleanPath(r.URL.Path); p != r.URL.Path {
		mr = r.Clone(r.Context())
		mr.URL.Path = p
		mr.URL.RawPath = ""
	}
	h, _ := m.mux.Handler(mr)
	if i, ok := h.(routeMarker); ok {
		return m.routes[i]
	}
	return nil
}

func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	if c[0] != '/' {
		c = "/" + c
	}
	return c
}

// SafeMethod reports whether method is one the middleware passes through
// untouched (GET, HEAD, OPTIONS, TRACE): the methods that need no key.
func SafeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	var rt *route
	if !SafeMethod(r.Method) {
		rt = m.match(r)
	}
	if rt == nil {
		next.ServeHTTP(w, r)
		if m.observe != nil {
			m.observe(r, Event{Outcome: OutcomePassThrough})
		}
		return
	}
	ev := Event{Route: rt.pattern}
	defer func() {
		if m.observe != nil {
			m.observe(r, ev)
		}
	}()
	reject := func(k Kind, key, detail string) {
		p := &Problem{Kind: k, Key: key, Detail: detail}
		if k == KindStoreUnavailable || k == KindInProgress {
			p.RetryAfter = time.Second
		}
		rt.profile.writeProblem(w, p)
		ev.Outcome, ev.Kind, ev.Status = OutcomeRejected, k, p.Status
	}

	raw, present, err := ParseKey(r.Header.Values(HeaderName))
	switch {
	case errors.Is(err, ErrMultipleKeys):
		reject(KindMultipleKeys, "", "send exactly one Idempotency-Key field")
		return
	case err != nil:
		reject(KindInvalidKey, "", "the Idempotency-Key field is not a valid Structured Field string")
		return
	case !present && rt.Key == KeyRequired:
		reject(KindMissingKey, "", "this endpoint requires an Idempotency-Key header")
		return
	case !present:
		ev.Outcome = OutcomePassThrough
		next.ServeHTTP(w, r)
		return
	}
	key, err := idem.ValidateKey(raw, rt.eng.Policy().MaxKeyBytes)
	if err != nil {
		var ke *idem.KeyError
		detail := "invalid key"
		if errors.As(err, &ke) {
			detail = "the Idempotency-Key " + ke.Reason
		}
		reject(KindInvalidKey, printable(raw), detail)
		return
	}
	tenant := ""
	if m.tenant != nil {
		t, ok := m.tenant(r)
		if !ok {
			reject(KindTenantRequired, key, "a keyed request must identify its caller")
			return
		}
		tenant = t
	}

	// The incoming request is copied, never mutated: the copy gets a
	// request ID (in a copy of the headers) and a re-readable body.
	r = r.WithContext(r.Context())
	reqID := r.Header.Get(m.reqIDHeader)
	if reqID == "" {
		reqID = NewRequestID()
		r.Header = r.Header.Clone()
		r.Header.Set(m.reqIDHeader, reqID)
	}
	fp := ""
	if rt.Fingerprint != FingerprintNone {
		body, err := readBody(r, m.maxReq)
		if errors.Is(err, errTooLarge) {
			reject(KindRequestTooLarge, key, fmt.Sprintf("the body exceeds %d bytes", m.maxReq))
			return
		}
		if err != nil {
			// The client went away or sent a broken body: nothing to run.
			reject(KindUnreadableBody, key, "the request body could not be read")
			return
		}
		fp = fingerprint(r, body, rt)
	}
	scope := escapeTenant(tenant)
	if rt.profile.Scope == ScopeTenantEndpoint {
		scope += "|" + r.Method + " " + r.URL.Path
	}

	prof := rt.profile
	cap := newCapture(w, m.maxResp)
	ran := false
	res, err := rt.eng.Do(r.Context(), idem.Call{
		Scope:       scope,
		Key:         key,
		Fingerprint: fp,
		Binding:     r.Method + " " + r.URL.Path,
		RequestID:   reqID,
	}, func(ctx context.Context) ([]byte, error) {
		ran = true
		h := w.Header()
		if prof.ReplayedHeader != "" {
			h.Set(prof.ReplayedHeader, "false")
		}
		next.ServeHTTP(cap, r.WithContext(ctx))
		resp := cap.response(m.keepHeader)
		enc := resp.encode()
		if cap.notExecuted {
			return nil, &idem.Failure{Value: enc, Err: fmt.Errorf("idemhttp: handler answered %d: %w", resp.Status, idem.ErrNotExecuted)}
		}
		if cap.hijacked || rt.outcome.Contains(resp.Status) {
			return enc, nil
		}
		return nil, &idem.Failure{Value: enc, Err: statusError(resp.Status)}
	})
	if ran {
		ev.Outcome, ev.Status = OutcomeExecuted, cap.status
		if res.Unprotected {
			ev.Outcome = OutcomeUnprotected
		}
		var se statusError
		if err != nil && !errors.As(err, &se) && !errors.Is(err, idem.ErrNotExecuted) {
			// The handler ran but its outcome may not be recorded.
			m.log.Error("idem: outcome not recorded", "key", key, "scope", scope, "request_id", reqID, "err", err)
		}
		m.commit(w, cap, prof)
		return
	}

	var ce *idem.ConflictError
	switch {
	case err == nil:
		m.replay(w, res, prof, key, &ev, reject)
	case errors.As(err, &ce):
		switch ce.Type {
		case idem.ConflictPreviousFailure:
			if rt.eng.Policy().OnFailure == idem.OnFailureCache {
				m.replay(w, res, prof, key, &ev, reject)
				return
			}
			p := &Problem{Kind: KindPreviousFailure, Key: key, Detail: "the first request with this key failed; use a new key to try again"}
			if stored, derr := DecodeResponse(ce.Record.Value); derr == nil {
				p.Previous = newPreviousFailure(stored)
			}
			prof.writeProblem(w, p)
			ev.Outcome, ev.Kind, ev.Status = OutcomeRejected, KindPreviousFailure, p.Status
		case idem.ConflictInProgress:
			reject(KindInProgress, key, "a request with this key is still being processed; retry later")
		case idem.ConflictPayloadMismatch:
			reject(KindPayloadMismatch, key, "this key was used with a different request body or target")
		case idem.ConflictKeyReused:
			reject(KindKeyReused, key, "this key was used for "+ce.Record.Binding)
		}
		m.log.Info("idem: conflict", "key", key, "scope", scope, "conflict_type", ce.Type)
	case errors.Is(err, idem.ErrStoreUnavailable):
		m.log.Error("idem: store unavailable", "key", key, "err", err)
		reject(KindStoreUnavailable, key, "the idempotency store cannot be reached; nothing was executed")
	case r.Context().Err() != nil:
		// The client went away while waiting: nobody to answer.
		ev.Outcome = OutcomePassThrough
	default:
		m.log.Error("idem: unexpected error", "key", key, "err", err)
		reject(KindStoreUnavailable, key, "the request could not be checked; nothing was executed")
	}
}

func (m *middleware) keepHeader(name string) bool { return m.keep[name] }

// commit sends the first response once its outcome is recorded.
func (m *middleware) commit(w http.ResponseWriter, cap *capture, prof *Profile) {
	if cap.passing {
		return // already sent
	}
	body := cap.body.Bytes()
	if prof.BodyFlag != "" {
		if b, ok := withFlag(body, prof.BodyFlag, false); ok {
			body = b
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
	}
	w.WriteHeader(cap.status)
	_, _ = w.Write(body)
}

// replay sends a stored response.
func (m *middleware) replay(w http.ResponseWriter, res idem.Result, prof *Profile, key string, ev *Event, reject func(Kind, string, string)) {
	stored, err := DecodeResponse(res.Value)
	if err != nil {
		m.log.Error("idem: stored response unreadable", "key", key, "err", err)
		reject(KindResponseNotStored, key, "the stored response cannot be read")
		return
	}
	if stored.NotStored {
		reject(KindResponseNotStored, key, "the first response was too large or streamed, so it was not stored; it is not executed again")
		return
	}
	h := w.Header()
	for k, vs := range stored.Header {
		h[k] = vs
	}
	if prof.ReplayedHeader != "" {
		h.Set(prof.ReplayedHeader, "true")
	}
	if prof.OriginalRequestIDHeader != "" && res.RequestID != "" {
		h.Set(prof.OriginalRequestIDHeader, res.RequestID)
	}
	if prof.CachedHeader != "" {
		h.Set(prof.CachedHeader, "true")
	}
	body := stored.Body
	if prof.BodyFlag != "" {
		if b, ok := withFlag(body, prof.BodyFlag, true); ok {
			body = b
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(stored.Status)
	_, _ = w.Write(body)
	m.log.Debug("idem: replayed stored response", "key", key, "status", stored.Status)
	ev.Outcome, ev.Status = OutcomeReplayed, stored.Status
}

type statusError int

func (e statusError) Error() string { return "idemhttp: handler answered " + strconv.Itoa(int(e)) }

var errTooLarge = errors.New("idemhttp: request body too large")

func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > max {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b, nil
}

func fingerprint(r *http.Request, body []byte, rt *route) string {
	var digest string
	var err error
	switch {
	case rt.Fingerprint == FingerprintFields:
		digest, err = idem.HashJSONFields(body, rt.Fields...)
	case isJSON(r.Header.Get("Content-Type"), body):
		digest, err = idem.HashJSONBytes(body)
	default:
		err = errors.New("not JSON")
	}
	if err != nil {
		// Not canonicalizable: the raw bytes decide, which can only turn a
		// replay into a conflict.
		digest = idem.HashBytes(body)
	}
	return idem.HashParts([]byte(r.Method), []byte(r.URL.RequestURI()), []byte(digest))
}

func isJSON(contentType string, body []byte) bool {
	if strings.Contains(strings.ToLower(contentType), "json") {
		return true
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[') && contentType == ""
}

// withFlag adds "flag": v to a JSON object body, keeping the rest of its
// bytes as they are. Bodies that are not JSON objects are left alone.
func withFlag(body []byte, flag string, v bool) ([]byte, bool) {
	b := bytes.TrimSpace(body)
	if len(b) < 2 || b[0] != '{' || !json.Valid(b) {
		return nil, false
	}
	val := "false"
	if v {
		val = "true"
	}
	var out bytes.Buffer
	out.Grow(len(b) + len(flag) + 10)
	out.WriteString(`{"`)
	out.WriteString(flag)
	out.WriteString(`":`)
	out.WriteString(val)
	rest := bytes.TrimSpace(b[1:])
	if rest[0] != '}' {
		out.WriteByte(',')
	}
	out.Write(rest)
	return out.Bytes(), true
}

func escapeTenant(t string) string {
	if !strings.ContainsAny(t, "%|") {
		return t
	}
	return strings.NewReplacer("%", "%25", "|", "%7C").Replace(t)
}

// NewRequestID returns a random 128-bit request ID in hex, as the
// middleware gives requests that arrive without one.
func NewRequestID() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		u := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// printable returns s with non-printable bytes escaped, for echoing an
// invalid key back safely.
func printable(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
