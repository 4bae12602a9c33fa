package idemwire

import "net/http"

// HeaderName is the request header that carries the key (IETF draft
// "The Idempotency-Key HTTP Header Field", and Stripe).
const HeaderName = "Idempotency-Key"

// ExpiresHeader is the response header that tells a client until when the
// server retains its key, as an HTTP-date (IMF-fixdate): set on the first
// response a record keeps, on replays and on every answer about an
// existing record (409 in_progress, outcome_unknown, previous_failure,
// response_not_stored; 422 payload_mismatch, key_reused). Until then a
// retry with the key gets the key's outcome (or the same conflict); after
// it the key is forgotten, and a retry would run the operation again, so a
// client stops retrying it then.
const ExpiresHeader = "Idempotency-Key-Expires"

// ReplayedHeader is the response header that marks a replay ("true") in
// idem's default profile (IETF) and in Stripe's.
const ReplayedHeader = "Idempotent-Replayed"

// MetadataKey is the gRPC and Connect request metadata that carries the
// key: HeaderName in lower case, as gRPC metadata keys are, so that a
// Connect call over HTTP (where metadata are headers) sends the very
// header idemhttp reads.
const MetadataKey = "idempotency-key"

// SafeMethod reports whether method is one the middleware passes through
// untouched (GET, HEAD, OPTIONS, TRACE): the methods that need no key.
func SafeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
