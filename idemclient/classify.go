package idemclient

import (
	"bytes"
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

// retryKinds are idem's answers that nothing ran, or that no outcome was
// recorded yet: sent again with the same key, whatever their status (a 400
// unreadable_body included).
var retryKinds = map[string]bool{
	"unreadable_body": true, "body_timeout": true, "store_unavailable": true,
	"outcome_not_recorded": true, "upstream_unavailable": true, "upstream_timeout": true,
}

// classify says what an answer means, by the one rule every idem client
// follows (docs/problems.md, "How a client retries"; the vectors in
// clients/testdata/retry.json, which the TypeScript client passes too). A
// replay is always the outcome: the server answered from its record. Then
// idem's named problems decide: in_progress is waited out, a conflict is
// final and never sent again, the answers that nothing ran are retried.
// Then the status: 408, 429 and every 5xx but 501 and 505 (which say the
// same on every attempt) are retried with the key, which is safe since the
// server runs the key once; a 409 without a name is waited out only when
// it says when to come back (Retry-After), as idem's in_progress does, and
// is otherwise the operation's own stored outcome.
func classify(res *http.Response, body []byte) (verdict, string) {
	if Replayed(res) || replayedBody(body) {
		return final, ""
	}
	kind := ProblemKind(res.Header, body)
	switch {
	case kind == "in_progress":
		return running, kind
	case conflictKinds[kind]:
		return conflict, kind
	case retryKinds[kind]:
		return retry, kind
	}
	switch s := res.StatusCode; {
	case s == http.StatusConflict:
		if res.Header.Get("Retry-After") != "" {
			return running, "in_progress"
		}
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests,
		s >= 500 && s != http.StatusNotImplemented && s != http.StatusHTTPVersionNotSupported:
		return retry, kind
	}
	return final, kind
}

// replayedBody reports whether a JSON body says it is a replay
// ("idempotency_replayed": true, the workflow-admin profile's member).
func replayedBody(body []byte) bool {
	if !bytes.Contains(body, []byte(`"idempotency_replayed"`)) {
		return false
	}
	var doc struct {
		Replayed bool `json:"idempotency_replayed"`
	}
	return json.Unmarshal(body, &doc) == nil && doc.Replayed
}
