package testkit

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Request is the one request a SameKey fan-out sends n times: the mobile
// app's double tap, or a load balancer retrying a slow payment, all with
// the same idempotency key.
type Request struct {
	// Method is the request's method; POST when empty.
	Method string
	// URL is where every copy goes.
	URL string
	// Key is sent in KeyHeader; no key header when empty.
	Key string
	// KeyHeader names the header that carries Key; Idempotency-Key when
	// empty (the payments API and the IETF draft; other profiles use
	// X-Idempotency-Key).
	KeyHeader string
	// Header holds more headers, copied into every copy.
	Header http.Header
	// Body is every copy's body.
	Body string
}

// Response is what one copy got: the status, the header and the whole
// body, or the error that ended it.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// SameKey sends n copies of r through client, released at the same
// instant (FanOut), and returns each copy's response, in the order the
// copies were numbered. A nil client means a client of its own, whose
// connections are closed before SameKey returns, so that it leaves no
// goroutine behind.
func SameKey(ctx context.Context, client *http.Client, n int, r Request) []Response {
	if client == nil {
		tr := &http.Transport{MaxIdleConnsPerHost: n}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	method := r.Method
	if method == "" {
		method = http.MethodPost
	}
	keyHeader := r.KeyHeader
	if keyHeader == "" {
		keyHeader = "Idempotency-Key"
	}
	out := make([]Response, n)
	// Build every request before the start, so that the racers differ
	// only in when the network and the scheduler let them through.
	reqs := make([]*http.Request, n)
	for i := range reqs {
		req, err := http.NewRequestWithContext(ctx, method, r.URL, strings.NewReader(r.Body))
		if err != nil {
			out[i].Err = err
			continue
		}
		for name, vs := range r.Header {
			req.Header[name] = append([]string(nil), vs...)
		}
		if r.Key != "" {
			req.Header.Set(keyHeader, r.Key)
		}
		reqs[i] = req
	}
	FanOut(n, func(i int) {
		if reqs[i] == nil {
			return
		}
		res, err := client.Do(reqs[i])
		if err != nil {
			out[i].Err = err
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		out[i] = Response{Status: res.StatusCode, Header: res.Header, Body: body, Err: err}
	})
	return out
}

// Send sends req with http.DefaultClient and returns its response, whose
// body is read whole and closed; it fails t if either cannot be done.
func Send(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}
