package idemhttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// post sends a POST through h, as the caller Bearer sk_alice unless header
// says otherwise, and prints status, replay header and body.
func post(h http.Handler, path, key, body string, header ...string) {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer sk_alice")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), strings.TrimSpace(rec.Body.String()))
}

// charges is a payments API that numbers the charges it creates.
func charges() http.Handler {
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, n)
	})
}

// The middleware with its defaults: every POST, PUT, PATCH and DELETE with
// an Idempotency-Key runs once per caller (told apart by their
// credentials); retries get the first response back, and a keyed request
// that carries no credential gets 401. An
// answer about an existing key says until when the key is kept
// (key_expires_at, and the Idempotency-Key-Expires header): a day after
// its first request ended, by default. (The engine's clock is fixed here
// so that the output is.)
func Example() {
	eng := idem.New(memory.New(memory.WithClock(exampleClock)), idem.Policy{}, idem.WithClock(exampleClock))
	defer eng.Close()
	h := idemhttp.Middleware(eng, idemhttp.Options{})(charges())

	post(h, "/charges", "order-42", `{"amount":1000}`)
	post(h, "/charges", "order-42", `{"amount":1000}`)
	post(h, "/charges", "order-42", `{"amount":2000}`)
	post(h, "/charges", "order-42", `{"amount":1000}`, "Authorization", "Bearer sk_bob")
	post(h, "/charges", "order-42", `{"amount":1000}`, "Authorization", "")
	// Output:
	// 201 false {"charge":"ch_1"}
	// 201 true {"charge":"ch_1"}
	// 422  {"type":"https://github.com/idem-dev/idem/blob/main/docs/problems.md#payload_mismatch","title":"Idempotency-Key reused with a different request","status":422,"detail":"this key was used with a different request body or target","idempotency_key":"order-42","conflict_type":"payload_mismatch","key_expires_at":"2025-06-02T09:30:00Z"}
	// 201 false {"charge":"ch_2"}
	// 401  {"type":"https://github.com/idem-dev/idem/blob/main/docs/problems.md#tenant_required","title":"Caller identity is missing","status":401,"detail":"a keyed request must carry its caller's credentials (Authorization, a cookie, an API key or a TLS client certificate), so that its key is its caller's alone","idempotency_key":"order-42"}
}

// exampleClock is the engine's clock in the examples.
func exampleClock() time.Time { return time.Date(2025, 6, 1, 9, 30, 0, 0, time.UTC) }

// A route overrides one decision, its scope, with a function field: keys
// are shared by everyone in an organization (X-Org-ID, set by the
// authenticating proxy) instead of per caller. Everything else is the
// profile's.
func ExampleRoute_scope() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	h := idemhttp.Middleware(eng, idemhttp.Options{
		Routes: []idemhttp.Route{{
			Pattern: "POST /charges",
			Scope: func(r *http.Request, tenant string) string {
				return idemhttp.ScopeTenant.Format("org:"+r.Header.Get("X-Org-ID"), r.Method, r.URL.Path)
			},
		}},
	})(charges())

	post(h, "/charges", "k1", `{}`, "X-Org-ID", "acme", "Authorization", "Bearer alice")
	post(h, "/charges", "k1", `{}`, "X-Org-ID", "acme", "Authorization", "Bearer bob")
	rec, _ := eng.Lookup(context.Background(), "org:acme", "k1")
	fmt.Println(rec.State)
	// Output:
	// 201 false {"charge":"ch_1"}
	// 201 true {"charge":"ch_1"}
	// succeeded
}

// A route whose fingerprint is two JSON fields: a retry that changes other
// fields (a client-side timestamp) still replays; one that changes the
// answer is a conflict.
func ExampleFingerprintFields() {
	eng := idem.New(memory.New(memory.WithClock(exampleClock)), idem.Policy{}, idem.WithClock(exampleClock))
	defer eng.Close()
	h := idemhttp.Middleware(eng, idemhttp.Options{
		Routes: []idemhttp.Route{{
			Pattern:     "POST /answers",
			Fingerprint: idemhttp.FingerprintFields("stepId", "answer.value"),
		}},
	})(charges())

	post(h, "/answers", "a1", `{"stepId":"s1","answer":{"value":3},"sentAt":"09:00"}`)
	post(h, "/answers", "a1", `{"stepId":"s1","answer":{"value":3},"sentAt":"09:05"}`)
	post(h, "/answers", "a1", `{"stepId":"s1","answer":{"value":4},"sentAt":"09:06"}`)
	// Output:
	// 201 false {"charge":"ch_1"}
	// 201 true {"charge":"ch_1"}
	// 422  {"type":"https://github.com/idem-dev/idem/blob/main/docs/problems.md#payload_mismatch","title":"Idempotency-Key reused with a different request","status":422,"detail":"this key was used with a different request body or target","idempotency_key":"a1","conflict_type":"payload_mismatch","key_expires_at":"2025-06-02T09:30:00Z"}
}

// A server whose own answers to requests it cannot read (a header block
// past MaxHeaderBytes, a request that is not HTTP/1.1) come in
// problem+json like the middleware's.
func ExampleProblemListener() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: charges(), MaxHeaderBytes: 4 << 10}
	go srv.Serve(idemhttp.ProblemListener(ln))
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /charges HTTP/1.1\r\nContent-Length: 0\r\n\r\n") // no Host
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, res.Header.Get("Content-Type"))
	fmt.Println(string(body))
	// Output:
	// 400 application/problem+json
	// {"type":"https://github.com/idem-dev/idem/blob/main/docs/problems.md#malformed_request","title":"Request is not valid HTTP","status":400,"detail":"missing required Host header; nothing ran"}
}

// A handler that forwards the call elsewhere tells the middleware when it
// cannot know the outcome: after ReportOutcomeUnknown the key is never run
// again, and retries get 409 outcome_unknown; after ReportNotExecuted it is
// released, and a retry runs.
func ExampleReportOutcomeUnknown() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	calls := 0
	h := idemhttp.Middleware(eng, idemhttp.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			// The request left, and the upstream's answer never came.
			idemhttp.ReportOutcomeUnknown(w)
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))

	for range 2 {
		req := httptest.NewRequest("POST", "/transfers", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "transfer-1")
		req.Header.Set("Authorization", "Bearer sk_alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// 504
	// 409
	// handler calls: 1
}

// An API whose callers authenticate with a session cookie, and whose
// browsers also carry analytics cookies that change between a request and
// its retry: scoped by the session cookie alone, the retry is the same
// caller and is replayed; another session is another caller; a keyed
// request without the session cookie gets 401.
func ExampleTenantFrom() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	session, err := idemhttp.TenantFrom(idemhttp.TenantSource{Cookie: "session"})
	if err != nil {
		panic(err)
	}
	h := idemhttp.Middleware(eng, idemhttp.Options{Tenant: session})(charges())

	post(h, "/charges", "k1", `{}`, "Authorization", "", "Cookie", "session=s1; _ga=GA1.1")
	post(h, "/charges", "k1", `{}`, "Authorization", "", "Cookie", "_ga=GA1.2; session=s1")
	post(h, "/charges", "k1", `{}`, "Authorization", "", "Cookie", "session=s2")
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k1")
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// 201 false {"charge":"ch_1"}
	// 201 true {"charge":"ch_1"}
	// 201 false {"charge":"ch_2"}
	// 401
}
