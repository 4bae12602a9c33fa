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
	if len(b) < 6 || b[0] != encodingVersion {
		return nil, ErrBadEncoding
	}
	r := &StoredResponse{
		NotStored: b[1]&flagNotStored != 0,
		Status:    int(binary.BigEndian.Uint16(b[2:])),
		Header:    make(http.Header),
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
	for range count {
		k, ok1 := str()
		v, ok2 := str()
		if !ok1 || !ok2 {
			return nil, ErrBadEncoding
		}
		r.Header[k] = append(r.Header[k], v)
	}
	if r.Status < 100 || r.Status > 999 {
		return nil, ErrBadEncoding
	}
	r.Body = b
	return r, nil
}
