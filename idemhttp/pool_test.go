package idemhttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// TestPooledAttemptsNeverShared runs first executions and replays of many
// keys at once through one middleware, whose attempts (capture buffer,
// header map, request copy) are pooled, and compares every answer byte for
// byte with what its own key's handler wrote: a buffer reachable after it
// went back to the pool would show another key's bytes, and -race reports
// the overlapping writes. Bodies span sizes from a few bytes to past the
// pooled buffer's bound, so that buffers grow, are kept and are dropped.
func TestPooledAttemptsNeverShared(t *testing.T) {
	const keys = 48
	body := func(key string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
		// 3 bytes to about 70 KiB: past maxPooledBody for the last keys.
		return strings.Repeat(key+";", 1+n*n*n/50)
	}
	var executions atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executions.Add(1)
		key := r.Header.Get("Idempotency-Key")
		in, _ := io.ReadAll(r.Body)
		if string(in) != `{"key":"`+key+`"}` {
			t.Errorf("%s: handler read %q", key, in)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Key", key)
		w.Header().Add("X-Many", key+"-1")
		w.Header().Add("X-Many", key+"-2")
		w.WriteHeader(http.StatusCreated)
		b := body(key)
		// Several writes, so that the capture buffer grows as it would.
		for len(b) > 0 {
			n := min(len(b), 1000)
			io.WriteString(w, b[:n])
			b = b[n:]
		}
	})
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	h := idemhttp.Middleware(eng, idemhttp.Options{Logger: quiet, SharedAnonymousScope: true, ReplayHeaders: []string{"X-Key", "X-Many"}})(handler)

	check := func(key string) error {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"key":"`+key+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code != http.StatusCreated:
			return fmt.Errorf("%s: status %d: %s", key, rec.Code, rec.Body)
		case rec.Body.String() != body(key):
			return fmt.Errorf("%s: body of %d bytes is not its own (starts %.20q)", key, rec.Body.Len(), rec.Body.String())
		case rec.Header().Get("X-Key") != key:
			return fmt.Errorf("%s: X-Key %q", key, rec.Header().Get("X-Key"))
		case strings.Join(rec.Header().Values("X-Many"), ",") != key+"-1,"+key+"-2":
			return fmt.Errorf("%s: X-Many %q", key, rec.Header().Values("X-Many"))
		case rec.Header().Get("Content-Length") != "" && rec.Header().Get("Content-Length") != strconv.Itoa(len(body(key))):
			return fmt.Errorf("%s: Content-Length %s for %d bytes", key, rec.Header().Get("Content-Length"), len(body(key)))
		}
		return nil
	}
	// Keys never overlap while they run (the IETF profile answers a
	// concurrent retry 409): first every key of the first half runs at
	// once, then they are replayed three times over while the second half
	// runs for the first time.
	run := func(keys []string) {
		var wg sync.WaitGroup
		errs := make(chan error, len(keys))
		for _, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := check(key); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	var first, mixed []string
	for i := range keys {
		first = append(first, "k"+strconv.Itoa(i))
		mixed = append(mixed, "k"+strconv.Itoa(keys+i))
		for range 3 {
			mixed = append(mixed, "k"+strconv.Itoa(i))
		}
	}
	run(first)
	run(mixed)
	if n := executions.Load(); n != 2*keys {
		t.Errorf("%d executions of %d keys", n, 2*keys)
	}
}

// TestHandlerRequestIsItsOwn: the handler's request is a copy, its headers
// and body its own, with the request ID and the reservation's token; what
// the handler changes never reaches the client's request, and GetBody
// gives the body again.
func TestHandlerRequestIsItsOwn(t *testing.T) {
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	h := idemhttp.Middleware(eng, idemhttp.Options{Logger: quiet, SharedAnonymousScope: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Request-Id") == "" || r.Header.Get(idemhttp.TokenHeader) == "" || r.Header.Get(idemhttp.TokenHeader) == "999" {
			t.Errorf("handler headers: %v", r.Header)
		}
		if got := r.Header.Values("X-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
			t.Errorf("X-Multi %q", got)
		}
		r.Header.Add("X-Multi", "c")         // appends to the handler's copy only
		r.Header.Get("X-Other")              // untouched neighbour
		r.Header["X-Multi"][0] = "changed"   // in place, in the copy
		r.Header.Set("Idempotency-Key", "x") // never the client's
		b1, _ := io.ReadAll(r.Body)
		rc, err := r.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := io.ReadAll(rc)
		if string(b1) != `{"a":1}` || !bytes.Equal(b1, b2) {
			t.Errorf("body %q, GetBody %q", b1, b2)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"a":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "own-1")
	req.Header.Set(idemhttp.TokenHeader, "999")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	req.Header.Set("X-Other", "o")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d", rec.Code)
	}
	if got := req.Header.Values("X-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" ||
		req.Header.Get("X-Other") != "o" || req.Header.Get("Idempotency-Key") != "own-1" ||
		req.Header.Get("X-Request-Id") != "" || req.Header.Get(idemhttp.TokenHeader) != "999" {
		t.Errorf("the client's request changed: %v", req.Header)
	}
}
