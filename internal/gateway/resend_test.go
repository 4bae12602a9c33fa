package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
)

// TestResetIsNotResent: the upstream reads a keyed request on a reused
// connection, then resets it. http.Transport replays requests that carry
// Idempotency-Key in that case; the gateway must not let it, or one client
// request runs twice upstream. With or without a body.
func TestResetIsNotResent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[key]++
		mu.Unlock()
		if key == "warm" {
			w.WriteHeader(201)
			return
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		c.(*net.TCPConn).SetLinger(0) // RST
		c.Close()
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(mustProxy(t, Options{Upstream: u, Engine: idem.New(memory.New(), idem.Policy{})}))
	defer gw.Close()
	for _, body := range []string{`{"amount":1}`, ""} {
		// A first request leaves an idle connection for the next to reuse.
		res := send(t, gw.URL+"/warm", "warm")
		res.Body.Close()
		req, _ := http.NewRequest("POST", gw.URL+"/charges", stringsReader(body))
		key := "reset-" + map[bool]string{true: "empty", false: "body"}[body == ""]
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		mu.Lock()
		n := runs[key]
		delete(runs, "warm")
		mu.Unlock()
		if n != 1 {
			t.Fatalf("%s: the upstream ran the request %d times (status %d)", key, n, res.StatusCode)
		}
		if res.StatusCode != http.StatusBadGateway && res.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("%s: status %d", key, res.StatusCode)
		}
	}
}

func stringsReader(s string) io.Reader {
	if s == "" {
		return nil
	}
	return &stringReader{s: s}
}

type stringReader struct{ s string }

func (r *stringReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}

// TestRequestIsOneWrite: the gateway sends a keyed request's headers and
// body to the upstream in one write. ReverseProxy's own wrapper around the
// body makes the Transport flush the headers first: a second system call
// and packet for every request.
func TestRequestIsOneWrite(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	var writes atomic.Int64
	tr := NewTransport(time.Minute)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{Conn: c, writes: &writes}, err
	}
	defer tr.CloseIdleConnections()
	u, _ := url.Parse(up.URL)
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	gw := mustProxy(t, Options{Upstream: u, Engine: eng, Transport: tr})
	for i := range 5 {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1000,"currency":"eur"}`))
		req.Header.Set("Idempotency-Key", fmt.Sprint("one-write-", i))
		rec := httptest.NewRecorder()
		before := writes.Load()
		gw.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if n := writes.Load() - before; n != 1 {
			t.Fatalf("request %d reached the upstream in %d writes, want 1", i, n)
		}
	}
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}
