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
	KindMissingKey        Kind = "missing_key"         // 400
	KindInvalidKey        Kind = "invalid_key"         // 400
	KindMultipleKeys      Kind = "multiple_keys"       // 400
	KindTenantRequired    Kind = "tenant_required"     // 401
	KindRequestTooLarge   Kind = "request_too_large"   // 413
	KindUnreadableBody    Kind = "unreadable_body"     // 400
	KindInProgress        Kind = "in_progress"         // 409
	KindPayloadMismatch   Kind = "payload_mismatch"    // 422
	KindKeyReused         Kind = "key_reused"          // 422
	KindPreviousFailure   Kind = "previous_failure"    // 409
	KindResponseNotStored Kind = "response_not_stored" // 409
	KindStoreUnavailable  Kind = "store_unavailable"   // 503
	// The gateway's own answers when its upstream fails.
	KindUpstreamUnavailable Kind = "upstream_unavailable" // 502
	KindUpstreamTimeout     Kind = "upstream_timeout"     // 504
)

// IsConflict reports whether k is about an existing record.
func (k Kind) IsConflict() bool {
	switch k {
	case KindInProgress, KindPayloadMismatch, KindKeyReused, KindPreviousFailure, KindResponseNotStored:
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
	KindRequestTooLarge:     "Request body is too large",
	KindUnreadableBody:      "Request body could not be read",
	KindInProgress:          "A request with this Idempotency-Key is in progress",
	KindPayloadMismatch:     "Idempotency-Key reused with a different request",
	KindKeyReused:           "Idempotency-Key reused for another action or target",
	KindPreviousFailure:     "The first request with this Idempotency-Key failed",
	KindResponseNotStored:   "The response to this Idempotency-Key was not stored",
	KindStoreUnavailable:    "Idempotency store unavailable",
	KindUpstreamUnavailable: "Upstream unavailable",
	KindUpstreamTimeout:     "Upstream timed out",
}

// Problem is an answer idem gives itself. Profiles write it in their shape;
// the default is RFC 9457 application/problem+json.
type Problem struct {
	Kind   Kind
	Status int
	Detail string
	// Key is the idempotency key, when there is one.
	Key string
	// Previous is the stored failure for KindPreviousFailure under
	// OnFailureConflict (seed 000's "previous failure context").
	Previous *PreviousFailure
	// RetryAfter, when positive, is sent as a Retry-After header.
	RetryAfter time.Duration
}

// PreviousFailure is the first response to a key that failed.
type PreviousFailure struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body,omitempty"`
	Text   string          `json:"text,omitempty"`
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
}

// WriteProblemJSON writes p as application/problem+json (RFC 9457) with the
// members type, title, status, detail, idempotency_key and conflict_type.
func WriteProblemJSON(w http.ResponseWriter, p *Problem) {
	body := problemJSON{
		Type:            ProblemTypeBase + string(p.Kind),
		Title:           p.Title(),
		Status:          p.Status,
		Detail:          p.Detail,
		IdempotencyKey:  p.Key,
		PreviousFailure: p.Previous,
	}
	if p.Kind.IsConflict() {
		body.ConflictType = p.Kind
	}
	writeJSON(w, p, "application/problem+json", body)
}

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
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
