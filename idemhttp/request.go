package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/httpfield"
)

// TokenHeader carries the fencing token of the reservation to the handler
// (and, through the gateway, to the upstream): an upstream that remembers
// the highest token per key can refuse a holder that lost its lease.
const TokenHeader = "Idempotency-Token"

// parseKey returns the request's validated key; "" and no problem when it
// carries none and the route lets it pass.
func (rt *route) parseKey(r *http.Request) (string, *Problem) {
	raw, present, err := httpfield.ParseKey(r.Header.Values(HeaderName))
	switch {
	case errors.Is(err, httpfield.ErrMultipleKeys):
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

// handlerRequest is the request the handler gets: a copy of r with ctx, a
// re-readable body and its own headers (a request ID, the reservation's
// Idempotency-Token and never one the client sent), made in p where they
// fit.
func (m *middleware) handlerRequest(ctx context.Context, r *http.Request, p *runParts, body []byte, reqID string, token uint64, hasToken bool) *http.Request {
	fr := r.WithContext(ctx)
	fr.Header = handlerHeader(r.Header, p.vals[:0], m.reqIDHeader, reqID, token, hasToken)
	if body != nil {
		b := &p.body
		b.body = body
		b.Reset(body)
		fr.Body, fr.GetBody = b, b.reopen
	}
	return fr
}

// runParts is what a handler's run holds of its own beside the request
// copy WithContext makes, in one allocation: its body's reader, the
// values of its header when they fit (most requests carry fewer fields),
// and the values of the two fields idem adds to the first response
// (Idempotent-Replayed, Idempotency-Key-Expires).
type runParts struct {
	body  requestBody
	vals  [inlineValues]string
	marks [2]string
}

const inlineValues = 16

// countValues is how many values handlerHeader gives the handler at most:
// the client's and the two it sets.
func countValues(h http.Header) int {
	nv := 2
	for _, vs := range h {
		nv += len(vs)
	}
	return nv
}

// handlerHeader is a copy of the client's header with the request ID and
// the token set, as Clone then Set would make it, in two allocations: the
// map, sized for all, and the token's digits; every value goes in vals
// (appended to), grown in one allocation when it cannot hold them all.
// reqIDHeader is in canonical form.
func handlerHeader(h http.Header, vals []string, reqIDHeader, reqID string, token uint64, hasToken bool) http.Header {
	if nv := countValues(h); cap(vals)-len(vals) < nv {
		vals = make([]string, 0, nv)
	}
	out := make(http.Header, len(h)+2)
	for k, vs := range h {
		if vs == nil || k == reqIDHeader || k == TokenHeader {
			// nil as Clone keeps it; the two set below, never the client's.
			if vs == nil {
				out[k] = nil
			}
			continue
		}
		n := len(vals)
		vals = append(vals, vs...)
		out[k] = vals[n:len(vals):len(vals)]
	}
	vals = append(vals, reqID)
	out[reqIDHeader] = vals[len(vals)-1 : len(vals) : len(vals)]
	if hasToken {
		vals = append(vals, strconv.FormatUint(token, 10))
		out[TokenHeader] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	return out
}

// requestBody is the handler's re-readable copy of the body: the reader,
// its Close and GetBody in one value.
type requestBody struct {
	bytes.Reader
	body []byte
}

func (*requestBody) Close() error { return nil }

func (b *requestBody) reopen() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.body)), nil
}

// readBody reads the whole body under the body deadline. A client that
// stalls gets 408 and its connection is closed.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > m.maxReq {
		return nil, m.tooLarge()
	}
	if m.bodyTimeout > 0 {
		if rd := readDeadliner(w); rd != nil && rd.SetReadDeadline(time.Now().Add(m.bodyTimeout)) == nil {
			defer rd.SetReadDeadline(time.Time{})
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
		return nil, m.tooLarge()
	}
	return b, nil
}

func (m *middleware) tooLarge() *Problem {
	return &Problem{Kind: KindRequestTooLarge, Detail: "the body exceeds " + strconv.FormatInt(m.maxReq, 10) + " bytes"}
}

// readDeadliner finds what http.ResponseController.SetReadDeadline would
// call, or nil. A writer without one (a test's recorder, a framework's
// wrapper) then costs nothing, where the controller builds an error for it.
func readDeadliner(w http.ResponseWriter) interface{ SetReadDeadline(time.Time) error } {
	for {
		switch x := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

func isJSON(contentType string, body []byte) bool {
	if strings.Contains(strings.ToLower(contentType), "json") {
		return true
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[') && contentType == ""
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
