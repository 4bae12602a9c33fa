package idemhttp

import (
	"bufio"
	"bytes"
	"mime"
	"net"
	"net/http"
)

// capture holds a handler's response back until its outcome is recorded, so
// that a client that sees a response can be sure a retry replays it. Two
// kinds of response cannot be held and pass straight through, recorded
// without their body: bodies over the size limit, and streams
// (text/event-stream, hijacked connections).
//
// It keeps Flush, Hijack and Unwrap working, as chi's wrap_writer does;
// http.ResponseController finds the underlying writer through Unwrap.
type capture struct {
	rw  http.ResponseWriter
	max int

	status      int
	wroteHeader bool
	header      http.Header // snapshot taken at WriteHeader
	body        bytes.Buffer
	passing     bool // the response is going straight to rw
	notStored   bool // the body is not (fully) kept
	hijacked    bool
	notExecuted bool // the handler says nothing ran (NotExecuted)
}

// NotExecuted tells the middleware that the handler writing to w did not
// execute the operation (a proxy that could not reach its upstream, a
// dependency that refused the call before anything happened): whatever it
// answers, the key is released so that a retry runs, even under profiles
// that keep every status. It does nothing for a writer the middleware does
// not wrap.
func NotExecuted(w http.ResponseWriter) {
	for {
		switch x := w.(type) {
		case *capture:
			x.notExecuted = true
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

func newCapture(rw http.ResponseWriter, max int) *capture {
	return &capture{rw: rw, max: max, status: http.StatusOK}
}

func (c *capture) Header() http.Header { return c.rw.Header() }

func (c *capture) WriteHeader(code int) {
	if c.wroteHeader || c.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// Informational responses (103 Early Hints) are not the outcome.
		c.rw.WriteHeader(code)
		return
	}
	c.wroteHeader = true
	c.status = code
	c.header = c.rw.Header().Clone()
	if isStream(c.header) || code == http.StatusSwitchingProtocols {
		c.passThrough()
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	if c.passing {
		return c.rw.Write(p)
	}
	if c.body.Len()+len(p) > c.max {
		c.passThrough()
		return c.rw.Write(p)
	}
	return c.body.Write(p)
}

// passThrough sends what is held and lets the rest of the response through.
func (c *capture) passThrough() {
	if c.passing {
		return
	}
	c.passing = true
	c.notStored = true
	c.rw.WriteHeader(c.status)
	if c.body.Len() > 0 {
		_, _ = c.rw.Write(c.body.Bytes())
	}
	c.body = bytes.Buffer{}
}

// Flush is a no-op while the response is held: ReverseProxy flushes every
// chunked response, and holding it is the point. Streams pass through and
// are flushed.
func (c *capture) Flush() {
	if c.passing {
		_ = http.NewResponseController(c.rw).Flush()
	}
}

func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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

// response returns what the handler answered, with the kept headers only.
func (c *capture) response(keep func(string) bool) *StoredResponse {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	r := &StoredResponse{Status: c.status, Header: http.Header{}, NotStored: c.notStored}
	for k, vs := range c.header {
		if keep(k) {
			r.Header[k] = vs
		}
	}
	if !c.notStored {
		r.Body = c.body.Bytes()
	}
	return r
}

func isStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}
