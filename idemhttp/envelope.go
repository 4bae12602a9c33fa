package idemhttp

import (
	"net/http"
	"strings"
)

// Text is the code and message of one kind of problem in an application's
// error envelope.
type Text struct {
	Code    string // the envelope's error.code
	Message string // the envelope's error.message
}

// Envelope returns a Profile.WriteProblem that writes idem's answers in the
// envelope many JSON APIs use instead of problem+json:
//
//	{"success":false,"error":{"code":"DUPLICATE_OPERATION","message":"...",
//	 "details":{"idempotencyKey":"...","conflictType":"payload_mismatch",
//	 "keyExpiresAt":"2025-06-02T09:30:00Z"}}}
//
// The Idempotency-Key-Expires header is set as in every shape.
//
// texts gives each kind its code and message; a kind missing from it gets
// its name in capitals as the code and the problem's title as the message.
func Envelope(texts map[Kind]Text) func(w http.ResponseWriter, p *Problem) {
	texts = copyTexts(texts)
	return func(w http.ResponseWriter, p *Problem) {
		t, ok := texts[p.Kind]
		if !ok {
			t = Text{Code: strings.ToUpper(string(p.Kind)), Message: p.Title()}
		}
		details := map[string]any{}
		if p.Key != "" {
			details["idempotencyKey"] = p.Key
		}
		if p.Kind.IsConflict() {
			details["conflictType"] = p.Kind
		}
		if p.Previous != nil {
			details["previousFailure"] = p.Previous
		}
		if p.RequestID != "" {
			details["requestId"] = p.RequestID
		}
		if !p.KeyExpires.IsZero() {
			details["keyExpiresAt"] = rfc3339(p.KeyExpires)
		}
		body := map[string]any{
			"success": false,
			"error":   map[string]any{"code": t.Code, "message": t.Message, "details": details},
		}
		writeJSON(w, p, "application/json", body)
	}
}

func copyTexts(m map[Kind]Text) map[Kind]Text {
	c := make(map[Kind]Text, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// MobileTexts returns the Mobile profile's texts (German wording), a preset
// of the Mobile profile; change entries of the returned map and pass it to
// Envelope to reword them.
func MobileTexts() map[Kind]Text {
	return map[Kind]Text{
		KindMissingKey:          {"IDEMPOTENCY_KEY_REQUIRED", "Idempotency-Key fehlt."},
		KindInvalidKey:          {"INVALID_IDEMPOTENCY_KEY", "Idempotency-Key ist ungültig."},
		KindMultipleKeys:        {"INVALID_IDEMPOTENCY_KEY", "Mehr als ein Idempotency-Key."},
		KindTenantRequired:      {"UNAUTHORIZED", "Nicht angemeldet."},
		KindPathVariant:         {"INVALID_PATH", "Dieser Pfad ist eine Variante eines geschützten Endpunkts; bitte den Pfad des Endpunkts verwenden."},
		KindRequestTooLarge:     {"PAYLOAD_TOO_LARGE", "Anfrage ist zu groß."},
		KindUnreadableBody:      {"BAD_REQUEST", "Anfrage konnte nicht gelesen werden."},
		KindBodyTimeout:         {"REQUEST_TIMEOUT", "Die Anfrage kam nicht rechtzeitig an."},
		KindTooManyKeys:         {"TOO_MANY_REQUESTS", "Zu viele offene Idempotency-Keys; bitte später erneut versuchen."},
		KindInProgress:          {"OPERATION_IN_PROGRESS", "Eine Anfrage mit diesem Idempotency-Key wird noch verarbeitet."},
		KindPayloadMismatch:     {"DUPLICATE_OPERATION", "Idempotency-Key wurde bereits mit unterschiedlichen Daten verwendet."},
		KindKeyReused:           {"DUPLICATE_OPERATION", "Idempotency-Key wurde bereits für eine andere Aktion verwendet."},
		KindPreviousFailure:     {"PREVIOUS_OPERATION_FAILED", "Die erste Anfrage mit diesem Idempotency-Key ist fehlgeschlagen."},
		KindResponseNotStored:   {"RESPONSE_NOT_STORED", "Die Antwort auf diesen Idempotency-Key wurde nicht gespeichert."},
		KindOutcomeUnknown:      {"OUTCOME_UNKNOWN", "Das Ergebnis der ersten Anfrage mit diesem Idempotency-Key ist unbekannt."},
		KindOutcomeNotRecorded:  {"OUTCOME_NOT_RECORDED", "Das Ergebnis konnte nicht gespeichert werden; bitte mit demselben Idempotency-Key wiederholen."},
		KindStoreUnavailable:    {"SERVICE_UNAVAILABLE", "Dienst vorübergehend nicht verfügbar."},
		KindUpstreamUnavailable: {"SERVICE_UNAVAILABLE", "Dienst vorübergehend nicht verfügbar."},
		KindUpstreamTimeout:     {"GATEWAY_TIMEOUT", "Der Dienst hat nicht rechtzeitig geantwortet."},
		KindHeadersTooLarge:     {"HEADERS_TOO_LARGE", "Die Kopfzeilen der Anfrage sind zu groß."},
		KindMalformedRequest:    {"BAD_REQUEST", "Die Anfrage ist ungültig."},
	}
}
