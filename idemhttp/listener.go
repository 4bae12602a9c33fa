package idemhttp

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
)

// ProblemListener returns ln with its connections' answers from net/http
// itself turned into problem+json. net/http answers a few requests before
// any handler sees them: 431 for a header block past the server's
// MaxHeaderBytes, 400 for a request that is not valid HTTP/1.1 (a malformed
// Host, a bad header name, a conflicting Content-Length), 501 for a transfer
// coding it does not know. It writes those in text/plain, straight onto the
// connection, so that no middleware can shape them; a server that answers
// every other error in problem+json wants these the same. The status is
// kept; the body becomes a problem of kind headers_too_large or
// malformed_request (problem+json whatever the route's profile: no route
// is known before the request is read).
//
// Every other write passes through untouched: a handler's response always
// lists its Connection header before its Content-Type (net/http sorts
// them), so it can never look like one of these. Only the bytes of a
// hijacked connection (an Upgrade passed through) could be written to
// match one byte for byte; they would be answered as a problem too.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{c}, nil
}

type problemConn struct{ net.Conn }

// CloseWrite lets net/http half-close the connection after a 431, as it
// does on a bare TCP connection, so that the client reads the answer.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the TCP connection's sendfile and splice for response
// bodies copied from a file or a socket.
func (c *problemConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *problemConn) Write(b []byte) (int, error) {
	if p, ok := rawProblem(b); ok {
		if _, err := c.Conn.Write(p); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// rawErrorHeaders follows the status line of every answer net/http writes
// on its own, and of no handler's.
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rawProblem returns the problem+json answer for b when b is one of
// net/http's own text/plain answers.
func rawProblem(b []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if len(b) < len(proto)+3 || !bytes.HasPrefix(b, []byte(proto)) || b[len(proto)] != '4' && b[len(proto)] != '5' {
		return nil, false
	}
	line := bytes.IndexByte(b, '\r')
	if line < 0 || !bytes.HasPrefix(b[line:], []byte(rawErrorHeaders)) {
		return nil, false
	}
	status, err := strconv.Atoi(string(b[len(proto) : len(proto)+3]))
	if err != nil || status < 400 || status > 599 {
		return nil, false
	}
	text := b[line+len(rawErrorHeaders):]
	p := &Problem{Kind: KindMalformedRequest, Status: status, Detail: "the request is not valid HTTP/1.1; nothing ran"}
	// net/http's own wording of what was wrong follows its status ("400
	// Bad Request: missing required Host header"): fixed texts, never the
	// request's bytes.
	_, why, _ := bytes.Cut(text, []byte(": "))
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		p.Kind, p.Detail = KindHeadersTooLarge, "the request's header block is larger than this server accepts; nothing ran"
	case len(why) > 0:
		p.Detail = string(why) + "; nothing ran"
	case status == http.StatusNotImplemented:
		p.Detail = "the request uses a transfer coding this server does not support; nothing ran"
	}
	// Written as every other problem is (WriteProblemJSON), then framed
	// as the response net/http would have sent.
	var rw rawWriter
	WriteProblemJSON(&rw, p)
	res := http.Response{StatusCode: rw.status, ProtoMajor: 1, ProtoMinor: 1, Header: rw.header,
		Body: io.NopCloser(&rw.body), ContentLength: int64(rw.body.Len()), Close: true}
	var out bytes.Buffer
	if err := res.Write(&out); err != nil { // cannot happen: all in memory
		return nil, false
	}
	return out.Bytes(), true
}

// rawWriter keeps what a handler writes, for rawProblem to frame.
type rawWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *rawWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *rawWriter) WriteHeader(status int)      { w.status = status }
func (w *rawWriter) Write(b []byte) (int, error) { return w.body.Write(b) }
