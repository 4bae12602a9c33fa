package gateway

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

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
