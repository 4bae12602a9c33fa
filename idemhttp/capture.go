package idemhttp

import (
	"bufio"
	"bytes"
	"errors"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
)

// capture holds a handler's response back until its outcome is recorded, so
// that a client that sees a response can be sure a retry replays it. Two
// kinds of response cannot be held and pass straight through, recorded
// without their body: bodies over the size limit, and streams
// (text/event-stream, hijacked connections).
//
// The handler writes its headers into the capture's own map, copied to the
// client's writer only when the response is sent: under Route.AnswerWithin
// the client may get its 504 while the handler still runs.
//
// It keeps Flush, Hijack and Unwrap working, as chi's wrap_writer does;
// http.ResponseController finds the underlying writer through Unwrap.
type capture struct {
	rw  http.ResponseWriter
	max int
	h   http.Header // the handler's header map, made on first use
	rt  *route      // the route, for WriteProblem

	mu          sync.Mutex // guards detached, and rw once the serving goroutine may detach
	status      int
	wroteHeader bool
	header      http.Header // the headers of the response, set at WriteHeader
	body        bytes.Buffer
	passing     bool // the response is going straight to rw
	notStored   bool // the body is not (fully) stored
	hijacked    bool
	notExecuted bool // the handler says nothing ran (ReportNotExecuted)
	unknown     bool // the handler says the request left but no answer came (ReportOutcomeUnknown)
	detached    bool // the client was answered; rw is no longer the handler's
}

var errDetached = errors.New("idemhttp: the client was already answered")

// ReportNotExecuted tells the middleware that the handler writing to w did not
// execute the operation (a proxy that could not reach its upstream, a
// dependency that refused the call before anything happened): whatever it
// answers, the key is released so that a retry runs, even under profiles
// that replay every status. It does nothing for a writer the middleware does
// not wrap.
func ReportNotExecuted(w http.ResponseWriter) {
	if c := findCapture(w); c != nil {
		c.notExecuted = true
	}
}

// ReportOutcomeUnknown tells the middleware that the request the handler
// writing to w sent on left, but no complete answer came back (a timeout, a
// reset, a body cut off): the operation may have run. The middleware then
// ends the call with an error wrapping idem.ErrOutcomeUnknown, and the
// engine records the key as failed with an unknown outcome (see
// idem.OutcomeUnknown, which reads that record). Whatever the handler
// answers, the key is never released for a retry to run again; under the
// engine's default Policy.OnUnknown retries get 409 outcome_unknown. It
// does nothing for a writer the middleware does not wrap.
func ReportOutcomeUnknown(w http.ResponseWriter) {
	if c := findCapture(w); c != nil {
		c.unknown = true
	}
}

func findCapture(w http.ResponseWriter) *capture {
	for {
		switch x := w.(type) {
		case *capture:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

func (c *capture) Header() http.Header {
	if c.h == nil {
		c.h = http.Header{}
	}
	return c.h
}

func (c *capture) WriteHeader(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wroteHeader || c.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// Informational responses (103 Early Hints) are not the outcome.
		if !c.detached {
			copyHeader(c.rw.Header(), c.h)
			c.rw.WriteHeader(code)
		}
		return
	}
	c.wroteHeader = true
	c.status = code
	// The header map becomes the response's, as net/http's does at
	// WriteHeader; it is not copied.
	c.header = c.Header()
	if isStream(c.header) || code == http.StatusSwitchingProtocols {
		c.passThrough()
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.passing && c.body.Len()+len(p) > c.max {
		c.passThrough()
	}
	switch {
	case c.passing && c.detached:
		return len(p), nil // nobody to send it to; the outcome is still recorded
	case c.passing:
		return c.rw.Write(p)
	}
	return c.body.Write(p)
}

// passThrough sends what is held and lets the rest of the response through.
// c.mu is held.
func (c *capture) passThrough() {
	if c.passing {
		return
	}
	c.passing = true
	c.notStored = true
	if !c.detached {
		copyHeader(c.rw.Header(), c.header)
		c.rw.WriteHeader(c.status)
		if c.body.Len() > 0 {
			_, _ = c.rw.Write(c.body.Bytes())
		}
	}
	c.body = bytes.Buffer{}
}

// detach takes rw away from the handler, so that the caller can answer the
// client itself, unless the response is already passing through.
func (c *capture) detach() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passing {
		return false
	}
	c.detached = true
	return true
}

func (c *capture) isDetached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detached
}

// Flush is a no-op while the response is held: ReverseProxy flushes every
// chunked response, and holding it is the point. Streams pass through and
// are flushed.
func (c *capture) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passing && !c.detached {
		_ = http.NewResponseController(c.rw).Flush()
	}
}

func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detached {
		return nil, nil, errDetached
	}
	conn, brw, err := http.NewResponseController(c.rw).Hijack()
	if err == nil {
		c.hijacked = true
		c.passing = true
		c.notStored = true
		if !c.wroteHeader {
			c.wroteHeader = true
			c.status = http.StatusSwitchingProtocols
			c.header = http.Header{}
		}
	}
	return conn, brw, err
}

func (c *capture) Unwrap() http.ResponseWriter { return c.rw }

// encode returns what the handler answered, with the replayed headers only,
// encoded for the record: a copy, never aliasing the capture's buffer.
func (c *capture) encode(replay func(string) bool) []byte {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	var body []byte
	if !c.notStored {
		body = c.body.Bytes()
	}
	return encodeResponse(c.status, c.notStored, c.header, replay, body)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = vs
	}
}

func isStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	// Most responses are not streams: tell them without ParseMediaType,
	// which allocates for its parameters.
	if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}
