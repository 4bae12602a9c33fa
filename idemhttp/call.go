package idemhttp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-dev/idem"
)

// TokenHeader carries the fencing token of the reservation to the handler
// (and, through the gateway, to the upstream): an upstream that remembers
// the highest token per key can refuse a holder that lost its lease.
const TokenHeader = "Idempotency-Token"

// parseKey returns the request's validated key; "" and no problem when it
// carries none and the route lets it pass.
func (rt *route) parseKey(r *http.Request) (string, *Problem) {
	raw, present, err := ParseKey(r.Header.Values(HeaderName))
	switch {
	case errors.Is(err, ErrMultipleKeys):
		return "", &Problem{Kind: KindMultipleKeys, Detail: "send exactly one Idempotency-Key field"}
	case err != nil:
		return "", &Problem{Kind: KindInvalidKey, Detail: "the Idempotency-Key field is not a valid Structured Field string"}
	case !present && rt.Key == KeyRequired:
		return "", &Problem{Kind: KindMissingKey, Detail: "this endpoint requires an Idempotency-Key header"}
	case !present:
		return "", nil
	}
	key, err := idem.ValidateKey(raw, rt.eng.Policy().MaxKeyBytes)
	if err != nil {
		var ke *idem.KeyError
		detail := "invalid key"
		if errors.As(err, &ke) {
			detail = "the Idempotency-Key " + ke.Reason
		}
		return "", &Problem{Kind: KindInvalidKey, Key: printable(raw), Detail: detail}
	}
	return key, nil
}

// newCall turns a request into the engine's call, or a problem; a request
// without a key that the route lets pass gets neither (a nil request). The
// body is read here, before anything is reserved, under the body deadline.
// The request passed on is a copy with a re-readable body; when the handler
// runs, it gets its own headers too (a request ID, the reservation's
// Idempotency-Token and never one the client sent).
func (m *middleware) newCall(w http.ResponseWriter, r *http.Request, rt *route) (idem.Call, *http.Request, *Problem) {
	key, p := rt.parseKey(r)
	if p != nil || key == "" {
		return idem.Call{}, nil, p
	}
	tenant, ok := m.tenant(r)
	if !ok {
		return idem.Call{}, nil, &Problem{Kind: KindTenantRequired, Key: key, Detail: "a keyed request must identify its caller"}
	}
	body, p := m.readBody(w, r)
	if p != nil {
		p.Key = key
		return idem.Call{}, nil, p
	}
	// The copy's headers are cloned only when the handler runs (see
	// attempt.fn): a replay needs none of this.
	fr := r.WithContext(r.Context())
	reqID := fr.Header.Get(m.reqIDHeader)
	if reqID == "" {
		reqID = NewRequestID()
	}
	if body != nil {
		fr.Body = io.NopCloser(bytes.NewReader(body))
		fr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return idem.Call{
		Scope:       rt.Scope(fr, tenant),
		Key:         key,
		Fingerprint: rt.Fingerprint(fr, body),
		Binding:     rt.Binding(fr),
		RequestID:   reqID,
	}, fr, nil
}

// readBody reads the whole body under the body deadline. A client that
// stalls gets 408 and its connection is closed.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	tooLarge := &Problem{Kind: KindRequestTooLarge, Detail: fmt.Sprintf("the body exceeds %d bytes", m.maxReq)}
	if r.ContentLength > m.maxReq {
		return nil, tooLarge
	}
	if m.bodyTimeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(m.bodyTimeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	var b []byte
	var err error
	if r.ContentLength > 0 && r.ContentLength <= 16<<10 {
		// net/http holds the body to its declared length: read exactly
		// that. Larger bodies grow as they arrive, so that a client that
		// announces megabytes and stalls holds no more than it sent.
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(io.LimitReader(r.Body, m.maxReq+1))
	}
	r.Body.Close()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		return nil, &Problem{Kind: KindBodyTimeout, Detail: fmt.Sprintf("the request body did not arrive within %s; nothing was executed", m.bodyTimeout)}
	case err != nil:
		// The client went away or sent a broken body: nothing to run.
		return nil, &Problem{Kind: KindUnreadableBody, Detail: "the request body could not be read"}
	case int64(len(b)) > m.maxReq:
		return nil, tooLarge
	}
	return b, nil
}

func isJSON(contentType string, body []byte) bool {
	if strings.Contains(strings.ToLower(contentType), "json") {
		return true
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[') && contentType == ""
}

// NewRequestID returns a random 128-bit request ID in hex, as the
// middleware gives requests that arrive without one.
func NewRequestID() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		u := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// printable returns s with non-printable bytes escaped, for echoing an
// invalid key back safely.
func printable(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
