package inspect

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/idem-dev/idem/store"
)

// Record is the JSON form of a store.Record.
type Record struct {
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	KeyHash     string    `json:"key_hash"`
	State       string    `json:"state"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	Binding     string    `json:"binding,omitempty"`
	RequestID   string    `json:"request_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	LeaseUntil  time.Time `json:"lease_until,omitzero"`
	// Stale is set for an in_progress record whose holder's lease is over.
	Stale      bool      `json:"stale,omitempty"`
	ValueBytes int       `json:"value_bytes"`
	Response   *Response `json:"response,omitempty"`
	// ValueText or ValueBase64 hold a value that is not an HTTP response.
	ValueText   *string `json:"value_text,omitempty"`
	ValueBase64 string  `json:"value_base64,omitempty"`
}

// Response is a decoded HTTP response value.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"headers,omitempty"`
	// NotStored: the body was too large or streamed and was not kept.
	NotStored bool `json:"not_stored,omitempty"`
	// The body: JSON as it is, other UTF-8 as text, the rest as base64.
	Body       json.RawMessage `json:"body,omitempty"`
	BodyText   *string         `json:"body_text,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
}

// New returns the JSON form of r as seen at now.
func New(r store.Record, now time.Time) Record {
	v := Record{
		Scope:       r.Scope,
		Key:         r.Key,
		KeyHash:     r.KeyHash,
		State:       string(r.State),
		Fingerprint: r.Fingerprint,
		Binding:     r.Binding,
		RequestID:   r.RequestID,
		CreatedAt:   r.CreatedAt,
		UpdatedAt:   r.UpdatedAt,
		ExpiresAt:   r.ExpiresAt,
		Stale:       r.Stale(now),
		ValueBytes:  len(r.Value),
	}
	if r.State == store.InProgress {
		v.LeaseUntil = r.LeaseUntil
	}
	if len(r.Value) == 0 {
		return v
	}
	if resp, err := DecodeResponse(r.Value); err == nil {
		v.Response = resp
		return v
	}
	if utf8.Valid(r.Value) {
		s := string(r.Value)
		v.ValueText = &s
	} else {
		v.ValueBase64 = base64.StdEncoding.EncodeToString(r.Value)
	}
	return v
}

// ErrNotResponse: a value is not an HTTP response stored by idemhttp.
var ErrNotResponse = errors.New("inspect: value is not a stored HTTP response")

// DecodeResponse decodes a value written by idemhttp's middleware.
//
// It mirrors idemhttp's unexported encoding (response.go, version 1):
//
//	version(1) flags(1) status(2) nheaders(2) {uvarint-len name, uvarint-len value}* body
//
// TestDecodeMiddlewareValue feeds it what the middleware really stores, so
// a change of that format fails the test rather than misleading operators.
// It would better be an exported idemhttp.DecodeResponse.
func DecodeResponse(b []byte) (*Response, error) {
	const version, flagNotStored = 1, 1
	if len(b) < 6 || b[0] != version || b[1]&^flagNotStored != 0 {
		return nil, ErrNotResponse
	}
	r := &Response{Status: int(binary.BigEndian.Uint16(b[2:])), NotStored: b[1]&flagNotStored != 0}
	if r.Status < 100 || r.Status > 999 {
		return nil, ErrNotResponse
	}
	count := int(binary.BigEndian.Uint16(b[4:]))
	b = b[6:]
	str := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	if count > 0 {
		r.Header = http.Header{}
	}
	for range count {
		k, ok1 := str()
		v, ok2 := str()
		if !ok1 || !ok2 || k == "" {
			return nil, ErrNotResponse
		}
		r.Header[k] = append(r.Header[k], v)
	}
	switch {
	case len(b) == 0:
	case json.Valid(b):
		r.Body = json.RawMessage(b)
	case utf8.Valid(b):
		s := string(b)
		r.BodyText = &s
	default:
		r.BodyBase64 = base64.StdEncoding.EncodeToString(b)
	}
	return r, nil
}

// Marshal returns v as indented JSON with a final newline.
func Marshal(v Record) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
