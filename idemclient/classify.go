package idemclient

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
)

// verdict is what an answer means for the request.
type verdict int

const (
	final    verdict = iota // the outcome: hand it to the caller
	retry                   // nothing ran, or it failed before an outcome: send again
	running                 // in_progress: the first request still runs
	conflict                // the key was used before: never resend it as new
)

// conflictKinds are idem's answers that the key is bound to an earlier
// request. The gateway names them in problem+json's conflict_type and in the
// mobile app's error.details.conflictType.
var conflictKinds = map[string]bool{
	"payload_mismatch": true, "key_reused": true, "previous_failure": true, "response_not_stored": true,
	// The first request's outcome is unknown (it stopped mid-way and the
	// route does not run it again): it may have run.
	"outcome_unknown": true,
}

// The mobile app's error codes (its {"success":false,"error":{...}} shape).
var mobileKinds = map[string]string{
	"OPERATION_IN_PROGRESS":     "in_progress",
	"DUPLICATE_OPERATION":       "payload_mismatch",
	"PREVIOUS_OPERATION_FAILED": "previous_failure",
	"RESPONSE_NOT_STORED":       "response_not_stored",
	"OUTCOME_UNKNOWN":           "outcome_unknown",
}

// ProblemKind returns the kind of idempotency problem an answer names, or
// "" when it names none. It reads every shape the gateway's profiles write,
// and Stripe's: problem+json's conflict_type, or the fragment of its type
// URI; the mobile app's error.details.conflictType or error.code; Stripe's
// error.type "idempotency_error" (in_progress when its message says the
// first request is still in progress, payload_mismatch otherwise).
func ProblemKind(header http.Header, body []byte) string {
	if ct, _, _ := mime.ParseMediaType(header.Get("Content-Type")); ct != "" && !strings.Contains(ct, "json") {
		return ""
	}
	var doc struct {
		Type         any    `json:"type"`
		ConflictType string `json:"conflict_type"`
		Error        *struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
			Details *struct {
				ConflictType string `json:"conflictType"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	if doc.ConflictType != "" {
		return doc.ConflictType
	}
	if t, ok := doc.Type.(string); ok {
		if _, frag, ok := strings.Cut(t, "#"); ok && frag != "" {
			return frag
		}
		// A type URI that names the kind in its last path segment
		// (".../problems/in_progress"): taken only when it is a kind this
		// client acts on, since any URI ends in some segment.
		if i := strings.LastIndexAny(t, "/:"); i >= 0 {
			if k := t[i+1:]; k == "in_progress" || conflictKinds[k] {
				return k
			}
		}
	}
	if e := doc.Error; e != nil {
		if e.Details != nil && e.Details.ConflictType != "" {
			return e.Details.ConflictType
		}
		if k, ok := mobileKinds[e.Code]; ok {
			return k
		}
		if e.Type == "idempotency_error" {
			m := strings.ToLower(e.Message)
			if strings.Contains(m, "in progress") || strings.Contains(m, "in-progress") {
				return "in_progress"
			}
			return "payload_mismatch"
		}
	}
	return ""
}

// classify says what an answer means. A replay is always the outcome: the
// server answered from its record. Otherwise idem's named problems decide;
// then 429 and 5xx are retried; a 409 without a name is retried only when it
// says when to come back (Retry-After), as idem's in_progress does, and is
// otherwise the operation's own stored outcome.
func classify(res *http.Response, body []byte) (verdict, string) {
	if Replayed(res) {
		return final, ""
	}
	kind := ProblemKind(res.Header, body)
	switch {
	case kind == "in_progress":
		return running, kind
	case conflictKinds[kind]:
		return conflict, kind
	}
	switch res.StatusCode {
	case http.StatusConflict:
		if res.Header.Get("Retry-After") != "" {
			return running, "in_progress"
		}
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retry, kind
	}
	return final, kind
}
