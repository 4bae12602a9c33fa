package idemhttp

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// StoredResponse is what a record keeps of an HTTP response.
type StoredResponse struct {
	Status int
	Header http.Header // only the kept headers
	Body   []byte
	// NotStored: the body was too large or streamed, so it was not kept;
	// a replay answers 409 response_not_stored instead.
	NotStored bool
}

// The encoding is a small length-prefixed binary format rather than JSON:
// bodies are arbitrary bytes, and it is on every request's path.
//
//	version(1) flags(1) status(2) nheaders(2) {name value}* body
//
// with every string prefixed by its uvarint length.
const (
	encodingVersion = 1
	flagNotStored   = 1
)

// ErrBadEncoding: a record's value is not a response stored by this
// package.
var ErrBadEncoding = errors.New("idemhttp: not a stored response")

func (r *StoredResponse) encode() []byte {
	n := 6 + len(r.Body)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
	}
	b := make([]byte, 0, n)
	var flags byte
	if r.NotStored {
		flags |= flagNotStored
	}
	b = append(b, encodingVersion, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(r.Status))
	count := 0
	for _, vs := range r.Header {
		count += len(vs)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(count))
	for k, vs := range r.Header {
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.Body...)
}

// DecodeResponse decodes a response the middleware stored as a record's
// value (for inspection tools).
func DecodeResponse(b []byte) (*StoredResponse, error) {
	r := &StoredResponse{Header: make(http.Header)}
	var err error
	r.Status, r.NotStored, r.Body, err = decodeInto(b, r.Header)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// decodeInto decodes a stored response, adding its headers to h: a replay
// writes them straight into the client's header map. A nil h only checks
// the encoding.
func decodeInto(b []byte, h http.Header) (status int, notStored bool, body []byte, err error) {
	if len(b) < 6 || b[0] != encodingVersion {
		return 0, false, nil, ErrBadEncoding
	}
	notStored = b[1]&flagNotStored != 0
	status = int(binary.BigEndian.Uint16(b[2:]))
	if status < 100 || status > 999 {
		return 0, false, nil, ErrBadEncoding
	}
	count := int(binary.BigEndian.Uint16(b[4:]))
	b = b[6:]
	field := func() ([]byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, false
		}
		f := b[w : w+int(n)]
		b = b[w+int(n):]
		return f, true
	}
	for range count {
		k, ok1 := field()
		v, ok2 := field()
		if !ok1 || !ok2 {
			return 0, false, nil, ErrBadEncoding
		}
		if h != nil {
			h[string(k)] = append(h[string(k)], string(v))
		}
	}
	return status, notStored, b, nil
}
