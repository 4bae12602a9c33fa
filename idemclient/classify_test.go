package idemclient_test

import (
	"net/http"
	"testing"

	"github.com/idem-dev/idem/idemclient"
)

func TestProblemKindShapes(t *testing.T) {
	t.Parallel()
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	plain := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name   string
		header http.Header
		body   string
		want   string
	}{
		{"ietf conflict_type", problem, `{"type":"https://x/problems.md#in_progress","conflict_type":"in_progress"}`, "in_progress"},
		{"problem type fragment", problem, `{"type":"https://x/problems.md#payload_mismatch","status":422}`, "payload_mismatch"},
		{"problem type path", problem, `{"type":"https://idem.example/problems/in_progress"}`, "in_progress"},
		{"unrelated type path", problem, `{"type":"https://example.com/probs/out-of-credit"}`, ""},
		{"mobile conflictType", plain, `{"success":false,"error":{"code":"DUPLICATE_OPERATION","details":{"conflictType":"key_reused"}}}`, "key_reused"},
		{"outcome unknown", problem, `{"type":"https://x/problems.md#outcome_unknown","conflict_type":"outcome_unknown"}`, "outcome_unknown"},
		{"mobile code", plain, `{"success":false,"error":{"code":"OPERATION_IN_PROGRESS"}}`, "in_progress"},
		{"mobile duplicate", plain, `{"success":false,"error":{"code":"DUPLICATE_OPERATION"}}`, "payload_mismatch"},
		{"stripe in progress", plain, `{"error":{"type":"idempotency_error","message":"There is currently another in-progress request using this Idempotent Key."}}`, "in_progress"},
		{"stripe mismatch", plain, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`, "payload_mismatch"},
		{"stripe card error", plain, `{"error":{"type":"card_error"}}`, ""},
		{"the API's own body", plain, `{"success":true,"data":{}}`, ""},
		{"not json", http.Header{"Content-Type": {"text/html"}}, `{"conflict_type":"in_progress"}`, ""},
		{"broken json", plain, `{"conflict_type":`, ""},
	} {
		if got := idemclient.ProblemKind(c.header, []byte(c.body)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
