package idemhttp

import (
	"errors"
	"strings"

	"github.com/dunglas/httpsfv"
)

// HeaderName is the request header that carries the key (IETF draft
// "The Idempotency-Key HTTP Header Field", and Stripe).
const HeaderName = "Idempotency-Key"

// ExpiresHeader is the response header that tells a client until when the
// server keeps its key: set on replays and on every answer about an
// existing record (409 in_progress, outcome_unknown, previous_failure,
// response_not_stored; 422 payload_mismatch, key_reused), as an HTTP-date
// (IMF-fixdate). Until then a retry with the key gets the key's outcome
// (or the same conflict); after it the key is forgotten, and a retry would
// run the operation again, so a client stops retrying it then.
const ExpiresHeader = "Idempotency-Key-Expires"

// Errors of ParseKey; both are answered with 400.
var (
	ErrMultipleKeys = errors.New("idemhttp: more than one Idempotency-Key field")
	ErrMalformedKey = errors.New("idemhttp: malformed Idempotency-Key field")
)

// ParseKey returns the key carried by the values of the Idempotency-Key
// fields of a request, and whether there was one. The draft defines the
// field as a Structured Field string ("8e03978e-40d5-43e8-bc93-6894a57f9324"
// with the quotes); Stripe's clients send the bare text. A value that starts
// with a quote is parsed as a Structured Field, anything else is taken as
// it is. More than one field is an error. The key is not validated here
// (see idem.ValidateKey).
func ParseKey(values []string) (key string, ok bool, err error) {
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, ErrMultipleKeys
	}
	v := strings.TrimSpace(values[0])
	if !strings.HasPrefix(v, `"`) {
		return v, true, nil
	}
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		return "", true, errors.Join(ErrMalformedKey, err)
	}
	s, isString := item.Value.(string)
	if !isString {
		return "", true, ErrMalformedKey
	}
	return s, true, nil
}
