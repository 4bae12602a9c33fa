package httpfield

import (
	"errors"
	"strings"

	"github.com/dunglas/httpsfv"
)

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

// FormatKey returns key as an Idempotency-Key field value that ParseKey
// reads back: as it is, or, when it starts with a quote, as a Structured
// Field string.
func FormatKey(key string) string {
	if !strings.HasPrefix(key, `"`) {
		return key
	}
	s, err := httpsfv.Marshal(httpsfv.NewItem(key))
	if err != nil {
		return key
	}
	return s
}
