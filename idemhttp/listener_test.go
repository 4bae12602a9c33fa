package idemhttp_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/idemhttp"
)

// rawServer serves h over real TCP through ProblemListener, with a 1 KiB
// header limit, and returns its address.
func rawServer(t testing.TB, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// After a 431, net/http lingers half a second before closing the
	// connection: the cleanup waits for every connection to close.
	var conns sync.WaitGroup
	srv := &http.Server{Handler: h, MaxHeaderBytes: 1 << 10, ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				conns.Done()
			}
		}}
	go srv.Serve(idemhttp.ProblemListener(ln))
	t.Cleanup(func() { srv.Close(); conns.Wait() })
	return ln.Addr().String()
}

// sendRaw writes raw on a new connection and reads one response.
func sendRaw(t testing.TB, addr, raw string) (*http.Response, []byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%q: body: %v", raw, err)
	}
	return res, body
}

func TestProblemListener(t *testing.T) {
	t.Parallel()
	addr := rawServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			// A handler's own text/plain 400 that closes the connection
			// is the handler's business, and stays as it is.
			w.Header().Set("Connection", "close")
			http.Error(w, "400 Bad Request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, tc := range []struct {
		name, raw string
		status    int
		kind      idemhttp.Kind
		detail    string
	}{
		{"header block too large", "POST /charges HTTP/1.1\r\nHost: a\r\nX-Padding: " + strings.Repeat("p", 8<<10) + "\r\n\r\n",
			431, idemhttp.KindHeadersTooLarge, "header block is larger"},
		{"no Host", "POST /charges HTTP/1.1\r\n\r\n", 400, idemhttp.KindMalformedRequest, "missing required Host header"},
		{"two Hosts", "POST /charges HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, idemhttp.KindMalformedRequest, "not valid HTTP/1.1"},
		{"bad header name", "POST /charges HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400, idemhttp.KindMalformedRequest, "invalid header name"},
		{"not HTTP", "hello there\r\n\r\n", 400, idemhttp.KindMalformedRequest, "not valid HTTP/1.1"},
		{"unknown transfer coding", "POST /charges HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501, idemhttp.KindMalformedRequest, "transfer coding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := sendRaw(t, addr, tc.raw)
			var p map[string]any
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("%d %v: not JSON: %q", res.StatusCode, res.Header, body)
			}
			if res.StatusCode != tc.status || res.Header.Get("Content-Type") != "application/problem+json" ||
				p["type"] != idemhttp.ProblemTypeBase+string(tc.kind) || p["status"] != float64(tc.status) ||
				!strings.Contains(p["detail"].(string), tc.detail) || p["title"] == "" || !res.Close {
				t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
			}
		})
	}
	t.Run("handlers untouched", func(t *testing.T) {
		res, body := sendRaw(t, addr, "GET /plain HTTP/1.1\r\nHost: a\r\n\r\n")
		if res.StatusCode != 400 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") || string(body) != "400 Bad Request\n" {
			t.Fatalf("%d %v %q", res.StatusCode, res.Header, body)
		}
		res, _ = sendRaw(t, addr, "POST /charges HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
		if res.StatusCode != 201 {
			t.Fatalf("%d %v", res.StatusCode, res.Header)
		}
	})
}

// FuzzProblemListener: whatever a client sends, an answer net/http gives
// on its own never leaks out in text/plain.
func FuzzProblemListener(f *testing.F) {
	addr := rawServer(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n", "GET / HTTP/1.1\r\n", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n", "GET / HTTP/9.9\r\nHost: a\r\n", "\x16\x03\x01\x02\x00", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("x", 2000) + "\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A head that announces a body waits for it until this deadline.
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
			return // the server hung up first
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return // no answer (a hang-up, or a request still waiting for its body)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 400 && res.Header.Get("Date") == "" {
			// net/http's own answer: it must be a problem.
			var p map[string]any
			if res.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p["status"] != float64(res.StatusCode) {
				t.Fatalf("%q: %d %v %q", head, res.StatusCode, res.Header, body)
			}
		}
	})
}
