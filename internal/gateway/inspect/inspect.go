package inspect

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/idem-dev/idem/idemhttp"
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
	// ReadAt is the store's clock when it read the record: the times above
	// are on that clock, which need not be the reader's.
	ReadAt time.Time `json:"read_at,omitzero"`
	// LeaseLeftMS is how long an in_progress record's lease still ran, as
	// the store judged when it read it.
	LeaseLeftMS int64 `json:"lease_left_ms,omitempty"`
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
	// NotStored: the body was too large or streamed and was not stored.
	NotStored bool `json:"not_stored,omitempty"`
	// The body: JSON as it is, other UTF-8 as text, the rest as base64.
	Body       json.RawMessage `json:"body,omitempty"`
	BodyText   *string         `json:"body_text,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
}

// New returns the JSON form of r, as its store judged it when it read it.
func New(r store.Record) Record {
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
		ReadAt:      r.ReadAt,
		Stale:       r.Stale(),
		ValueBytes:  len(r.Value),
	}
	if r.State == store.InProgress {
		v.LeaseUntil = r.LeaseUntil
		v.LeaseLeftMS = max(r.LeaseLeft.Milliseconds(), 0)
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

// DecodeResponse decodes a value written by idemhttp's middleware into its
// JSON form.
func DecodeResponse(b []byte) (*Response, error) {
	sr, err := idemhttp.DecodeResponse(b)
	if err != nil {
		return nil, ErrNotResponse
	}
	r := &Response{Status: sr.Status, NotStored: sr.NotStored}
	if len(sr.Header) > 0 {
		r.Header = sr.Header
	}
	switch body := sr.Body; {
	case len(body) == 0:
	case json.Valid(body):
		r.Body = json.RawMessage(body)
	case utf8.Valid(body):
		s := string(body)
		r.BodyText = &s
	default:
		r.BodyBase64 = base64.StdEncoding.EncodeToString(body)
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
