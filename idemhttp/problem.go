package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Kind names every answer idem gives itself instead of the handler's. The
// conflict kinds are reported as the problem's conflict_type member.
type Kind string

// The kinds of problem.
const (
	KindMissingKey     Kind = "missing_key"     // 400
	KindInvalidKey     Kind = "invalid_key"     // 400
	KindMultipleKeys   Kind = "multiple_keys"   // 400
	KindTenantRequired Kind = "tenant_required" // 401
	// A keyed request on a variant of a protected route's path (/charges/,
	// /Charges, /charges%2F, /charges;x) that no route covers as written.
	KindPathVariant       Kind = "path_variant"        // 400
	KindRequestTooLarge   Kind = "request_too_large"   // 413
	KindUnreadableBody    Kind = "unreadable_body"     // 400
	KindInProgress        Kind = "in_progress"         // 409
	KindPayloadMismatch   Kind = "payload_mismatch"    // 422
	KindKeyReused         Kind = "key_reused"          // 422
	KindPreviousFailure   Kind = "previous_failure"    // 409
	KindResponseNotStored Kind = "response_not_stored" // 409
	KindStoreUnavailable  Kind = "store_unavailable"   // 503
	KindBodyTimeout       Kind = "body_timeout"        // 408
	// The caller holds as many live keys as Options.MaxKeysPerTenant
	// allows: a new key is refused until one of its records expires.
	KindTooManyKeys Kind = "too_many_keys" // 429
	// The first request with the key left, but no complete answer came
	// back: it may have run, so the key is neither replayed nor run again.
	KindOutcomeUnknown Kind = "outcome_unknown" // 409
	// The handler ran but its outcome could not be recorded: the call may
	// have run; a retry with the same key learns what happened.
	KindOutcomeNotRecorded Kind = "outcome_not_recorded" // 503
	// The gateway's own answers when its upstream fails.
	KindUpstreamUnavailable Kind = "upstream_unavailable" // 502
	KindUpstreamTimeout     Kind = "upstream_timeout"     // 504
	// Answers net/http gives before any handler runs, in problem+json
	// through ProblemListener.
	KindHeadersTooLarge  Kind = "headers_too_large" // 431
	KindMalformedRequest Kind = "malformed_request" // 400 (501 for an unknown transfer coding)
)

// IsConflict reports whether k is about an existing record.
func (k Kind) IsConflict() bool {
	switch k {
	case KindInProgress, KindPayloadMismatch, KindKeyReused, KindPreviousFailure, KindResponseNotStored, KindOutcomeUnknown:
		return true
	}
	return false
}

// ProblemTypeBase prefixes the problem type URIs; each kind is a fragment of
// the page that explains it.
const ProblemTypeBase = "https://github.com/idem-dev/idem/blob/main/docs/problems.md#"

var problemTitles = map[Kind]string{
	KindMissingKey:          "Idempotency-Key is missing",
	KindInvalidKey:          "Idempotency-Key is invalid",
	KindMultipleKeys:        "More than one Idempotency-Key",
	KindTenantRequired:      "Caller identity is missing",
	KindPathVariant:         "The path is a variant of a protected route's",
	KindRequestTooLarge:     "Request body is too large",
	KindUnreadableBody:      "Request body could not be read",
	KindInProgress:          "A request with this Idempotency-Key is in progress",
	KindPayloadMismatch:     "Idempotency-Key reused with a different request",
	KindKeyReused:           "Idempotency-Key reused for another action or target",
	KindPreviousFailure:     "The first request with this Idempotency-Key failed",
	KindResponseNotStored:   "The response to this Idempotency-Key was not stored",
	KindStoreUnavailable:    "Idempotency store unavailable",
	KindBodyTimeout:         "Request body did not arrive in time",
	KindTooManyKeys:         "Too many live Idempotency-Keys for this caller",
	KindOutcomeUnknown:      "The outcome of the first request with this Idempotency-Key is unknown",
	KindOutcomeNotRecorded:  "The outcome of this request could not be recorded",
	KindUpstreamUnavailable: "Upstream unavailable",
	KindUpstreamTimeout:     "Upstream timed out",
	KindHeadersTooLarge:     "Request headers are too large",
	KindMalformedRequest:    "Request is not valid HTTP",
}

// Problem is an answer idem gives itself. Profiles write it in their shape;
// the default is RFC 9457 application/problem+json.
type Problem struct {
	// Kind names the answer.
	Kind Kind
	// Status is the HTTP status; 0 means the route profile's for Kind.
	Status int
	// Detail explains this occurrence to the client.
	Detail string
	// Key is the idempotency key, when there is one.
	Key string
	// Previous is the stored failure for KindPreviousFailure under
	// OnFailureConflict.
	Previous *PreviousFailure
	// RequestID, when set, is the ID of the first request with the key
	// (KindOutcomeUnknown), or of this request (KindOutcomeNotRecorded).
	RequestID string
	// RetryAfter, when positive, is sent as a Retry-After header.
	RetryAfter time.Duration
	// KeyExpires, when set, is when the record the answer is about
	// expires (the conflicts): sent as the Idempotency-Key-Expires header
	// (ExpiresHeader) and, in problem+json, the key_expires_at member.
	KeyExpires time.Time
}

// PreviousFailure is the first response to a key that failed.
type PreviousFailure struct {
	Status int             `json:"status"`         // its status
	Body   json.RawMessage `json:"body,omitempty"` // its body, when JSON
	Text   string          `json:"text,omitempty"` // its body, when not JSON
}

func newPreviousFailure(r *StoredResponse) *PreviousFailure {
	p := &PreviousFailure{Status: r.Status}
	if json.Valid(r.Body) {
		p.Body = r.Body
	} else if len(r.Body) > 0 {
		p.Text = string(r.Body)
	}
	return p
}

// Title returns the problem's short, fixed summary.
func (p *Problem) Title() string { return problemTitles[p.Kind] }

// problemJSON is the RFC 9457 body with idem's extension members.
type problemJSON struct {
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Status          int              `json:"status"`
	Detail          string           `json:"detail,omitempty"`
	IdempotencyKey  string           `json:"idempotency_key,omitempty"`
	ConflictType    Kind             `json:"conflict_type,omitempty"`
	PreviousFailure *PreviousFailure `json:"previous_failure,omitempty"`
	RequestID       string           `json:"request_id,omitempty"`
	KeyExpiresAt    string           `json:"key_expires_at,omitempty"`
}

// routeKey is the context key of the route a request matched.
type routeKey struct{}

// WriteProblem writes p in the shape of the route that covers r (a route
// under the Mobile profile answers in its error envelope), setting
// p.Status from the route's profile when it is 0. A handler behind the
// middleware uses it for answers of its own kinds (the gateway's 502 and
// 504). Outside a route it writes problem+json with the default statuses.
func WriteProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if c := findCapture(w); c != nil && c.rt != nil {
		c.rt.WriteProblem(w, p)
		return
	}
	if rt, ok := r.Context().Value(routeKey{}).(*route); ok {
		rt.WriteProblem(w, p)
		return
	}
	if p.Status == 0 {
		p.Status = defaultStatus[p.Kind]
	}
	WriteProblemJSON(w, p)
}

// WriteProblemJSON writes p as application/problem+json (RFC 9457) with the
// members type, title, status, detail, idempotency_key, conflict_type,
// request_id and key_expires_at (RFC 3339, UTC).
func WriteProblemJSON(w http.ResponseWriter, p *Problem) {
	body := problemJSON{
		Type:            ProblemTypeBase + string(p.Kind),
		Title:           p.Title(),
		Status:          p.Status,
		Detail:          p.Detail,
		IdempotencyKey:  p.Key,
		PreviousFailure: p.Previous,
		RequestID:       p.RequestID,
	}
	if !p.KeyExpires.IsZero() {
		body.KeyExpiresAt = rfc3339(p.KeyExpires)
	}
	if p.Kind.IsConflict() {
		body.ConflictType = p.Kind
	}
	writeJSON(w, p, "application/problem+json", body)
}

// setExpires sets the Idempotency-Key-Expires header to t, unless t is zero.
func setExpires(h http.Header, t time.Time) {
	if !t.IsZero() {
		h[ExpiresHeader] = []string{httpDate(t)}
	}
}

// httpDate formats t as an HTTP-date (IMF-fixdate). Both formats of the
// expiry drop the fraction of a second, so that neither says later than
// the record really expires.
//
// Every replay sends one, so it is written by hand: time.Format reads its
// layout on each call, at several times the cost. Years that do not take
// four digits go through Format.
func httpDate(t time.Time) string {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format(http.TimeFormat)
	}
	hour, min, sec := t.Clock()
	const days, months = "SunMonTueWedThuFriSat", "JanFebMarAprMayJunJulAugSepOctNovDec"
	var b [len(http.TimeFormat)]byte
	wd, m := 3*int(t.Weekday()), 3*(int(month)-1)
	two := func(at, v int) { b[at], b[at+1] = byte('0'+v/10), byte('0'+v%10) }
	copy(b[0:], days[wd:wd+3])
	b[3], b[4] = ',', ' '
	two(5, day)
	b[7] = ' '
	copy(b[8:], months[m:m+3])
	b[11] = ' '
	two(12, year/100)
	two(14, year%100)
	b[16] = ' '
	two(17, hour)
	b[19] = ':'
	two(20, min)
	b[22] = ':'
	two(23, sec)
	copy(b[25:], " GMT")
	return string(b[:])
}

// rfc3339 formats t in RFC 3339, in UTC, to the second.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeJSON(w http.ResponseWriter, p *Problem, contentType string, body any) {
	b, err := json.Marshal(body)
	if err != nil { // cannot happen with the types above
		b = []byte(`{"title":"internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((p.RetryAfter+time.Second-1)/time.Second)))
	}
	setExpires(h, p.KeyExpires)
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
