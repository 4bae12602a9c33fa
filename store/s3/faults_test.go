package s3store_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// faults is an http.RoundTripper that lets a test step into chosen
// requests: lose a response after the server acted on the request (as a
// dropped connection does), answer in the server's place, or run something
// just before the request leaves.
type faults struct {
	next http.RoundTripper // where requests go; nil means transport

	mu    sync.Mutex
	rules []*rule // guarded by mu
}

// rule applies to the requests match accepts, times times (0: always).
type rule struct {
	match  func(*http.Request) bool
	times  int
	before func(*http.Request)                // runs before the request is sent
	answer func(*http.Request) *http.Response // answers instead of the server
	lose   bool                               // sends the request, then reports a reset connection
	modify func(*http.Response)               // changes the server's answer
	hits   int                                // guarded by faults.mu
}

func (f *faults) add(r *rule) *rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
	return r
}

// hits returns how many requests r has applied to.
func (f *faults) hits(r *rule) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.hits
}

func (f *faults) pick(req *http.Request) *rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if (r.times == 0 || r.hits < r.times) && r.match(req) {
			r.hits++
			return r
		}
	}
	return nil
}

func (f *faults) RoundTrip(req *http.Request) (*http.Response, error) {
	next := f.next
	if next == nil {
		next = transport
	}
	r := f.pick(req)
	if r == nil {
		return next.RoundTrip(req)
	}
	if r.before != nil {
		r.before(req)
	}
	if r.answer != nil {
		if req.Body != nil {
			_, _ = io.Copy(io.Discard, req.Body)
			req.Body.Close()
		}
		resp := r.answer(req)
		resp.Request = req
		return resp, nil
	}
	resp, err := next.RoundTrip(req)
	if err == nil && r.modify != nil {
		r.modify(resp)
	}
	if err != nil || !r.lose {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The SDK retries this one, as it would a real reset.
	return nil, &connReset{}
}

type connReset struct{}

func (*connReset) Error() string { return "read tcp: connection reset by peer (injected)" }

// faultClient returns a client of srv whose requests go through f, with
// SDK retries that do not wait.
func (srv *server) faultClient(f *faults, mods ...func(*s3.Options)) *s3.Client {
	return srv.client(func(o *s3.Options) {
		o.HTTPClient = &http.Client{Transport: f}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
		for _, m := range mods {
			m(o)
		}
	})
}

// s3Error is a response as S3 writes errors.
func s3Error(status int, code string) func(*http.Request) *http.Response {
	return func(*http.Request) *http.Response {
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>injected</Message></Error>`
		return &http.Response{
			StatusCode: status,
			Status:     http.StatusText(status),
			Header:     http.Header{"Content-Type": {"application/xml"}},
			Body:       io.NopCloser(strings.NewReader(body)),
		}
	}
}

// Request matchers. Object requests name the key in the path.
func isPut(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("x-id") != "CreateBucket"
}
func isGet(r *http.Request) bool {
	return r.Method == http.MethodGet && !r.URL.Query().Has("list-type")
}
func isDelete(r *http.Request) bool { return r.Method == http.MethodDelete }

func ifNoneMatch(r *http.Request) bool { return isPut(r) && r.Header.Get("If-None-Match") == "*" }
func ifMatch(r *http.Request) bool     { return isPut(r) && r.Header.Get("If-Match") != "" }
