package idemhttp

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
)

// StoredResponse is what a record holds of an HTTP response.
type StoredResponse struct {
	Status int         // the handler's status
	Header http.Header // only the replayed headers
	Body   []byte      // the body as the handler wrote it
	// NotStored: the body was too large or streamed, so it was not stored;
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

// encodeResponse encodes a response with the headers of h that replay
// accepts (all of them when replay is nil), in one allocation.
func encodeResponse(status int, notStored bool, h http.Header, replay func(string) bool, body []byte) []byte {
	n, count := 6+len(body), 0
	for k, vs := range h {
		if replay != nil && !replay(k) {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
		count += len(vs)
	}
	b := make([]byte, 0, n)
	var flags byte
	if notStored {
		flags |= flagNotStored
	}
	b = append(b, encodingVersion, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.BigEndian.AppendUint16(b, uint16(count))
	for k, vs := range h {
		if replay != nil && !replay(k) {
			continue
		}
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, body...)
}

// DecodeResponse decodes a response the middleware stored as a record's
// value (for inspection tools).
func DecodeResponse(b []byte) (*StoredResponse, error) {
	r := &StoredResponse{Header: make(http.Header)}
	var err error
	r.Status, r.NotStored, r.Body, err = decodeInto(b, r.Header, nil, nil)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// decodeInto decodes a stored response, adding its headers to h: a replay
// writes them straight into the client's header map. A nil h only checks
// the encoding. The body aliases b. The header names and values are cut
// from one string and their value slices from one array (hv's, when not
// nil, which keeps room for the replay's own headers): two allocations
// whatever the number of headers.
//
// A stored record is data, not the middleware's word: a store anyone else
// can write (an unsealed one) may hold any header. So the headers added
// to h are only those replay accepts (every one when replay is nil), by their
// canonical names, and never one that frames the message or belongs to
// one connection (framing): the replay sets Content-Length itself, and a
// stored Transfer-Encoding or Connection would make one response read as
// two downstream.
func decodeInto(b []byte, h http.Header, hv *headerValues, replay func(string) bool) (status int, notStored bool, body []byte, err error) {
	if len(b) < 6 || b[0] != encodingVersion {
		return 0, false, nil, ErrBadEncoding
	}
	notStored = b[1]&flagNotStored != 0
	status = int(binary.BigEndian.Uint16(b[2:]))
	if status < 100 || status > 999 {
		return 0, false, nil, ErrBadEncoding
	}
	count := int(binary.BigEndian.Uint16(b[4:]))
	hdr := b[6:]
	off := 0
	field := func() (start, end int, ok bool) {
		n, w := binary.Uvarint(hdr[off:])
		if w <= 0 || n > uint64(len(hdr)-off-w) {
			return 0, 0, false
		}
		start = off + w
		off = start + int(n)
		return start, off, true
	}
	for range count {
		_, _, ok1 := field()
		_, _, ok2 := field()
		if !ok1 || !ok2 {
			return 0, false, nil, ErrBadEncoding
		}
	}
	body = hdr[off:]
	if h == nil || count == 0 {
		return status, notStored, body, nil
	}
	fields := string(hdr[:off])
	if hv == nil {
		hv = &headerValues{}
	}
	hv.grow(count + 5) // and the replay's own headers (see replay)
	off = 0
	for range count {
		ks, ke, _ := field()
		vs, ve, _ := field()
		k := fields[ks:ke]
		if !ValidHeaderName(k) {
			continue
		}
		k = textproto.CanonicalMIMEHeaderKey(k) // no copy when it already is
		if framing(k) || (replay != nil && !replay(k)) {
			continue
		}
		hv.add(h, k, fields[vs:ve])
	}
	return status, notStored, body, nil
}

// framing reports whether the canonical header name k frames the message
// or belongs to one connection (RFC 9110 section 7.6.1, RFC 9112): a
// response's own framing is the server's to set, never a stored record's.
func framing(k string) bool {
	switch k {
	case "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade",
		"Trailer", "Te", "Proxy-Connection", "Http2-Settings":
		return true
	}
	return strings.HasPrefix(k, "Proxy-")
}

// ValidHeaderName reports whether k is an HTTP field name (a token, RFC
// 9110 section 5.1): the one rule for stored headers and configured ones.
func ValidHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// headerValues hands out one-element value slices for a header map from
// one array. Each is capped at its element, so that a later Add to the
// header copies it instead of writing over its neighbour.
type headerValues struct{ vals []string }

func (hv *headerValues) grow(n int) {
	if hv.vals == nil {
		hv.vals = make([]string, 0, n)
	}
}

func (hv *headerValues) one(v string) []string {
	if len(hv.vals) == cap(hv.vals) {
		return []string{v}
	}
	hv.vals = append(hv.vals, v)
	n := len(hv.vals)
	return hv.vals[n-1 : n : n]
}

// add adds v to h's values of k, a canonical name.
func (hv *headerValues) add(h http.Header, k, v string) {
	if old := h[k]; len(old) > 0 {
		h[k] = append(old, v)
		return
	}
	h[k] = hv.one(v)
}

// set replaces h's values of k, canonicalized as http.Header.Set does.
func (hv *headerValues) set(h http.Header, k, v string) {
	h[textproto.CanonicalMIMEHeaderKey(k)] = hv.one(v)
}
