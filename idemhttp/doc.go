// Package idemhttp puts idem's guarantee on HTTP: net/http middleware that
// makes POST, PUT, PATCH and DELETE requests carrying an Idempotency-Key
// header run at most once per key, and replays the first response to every
// retry.
//
//	eng := idem.New(store, idem.Policy{})
//	h := idemhttp.Middleware(eng, idemhttp.Options{
//		Tenant: idemhttp.TenantHeader("X-User-ID"),
//		Routes: []idemhttp.Route{
//			{Pattern: "POST /charges", Key: idemhttp.KeyRequired},
//			{Pattern: "POST /answers", Fingerprint: idemhttp.FingerprintFields("stepId")},
//		},
//	})(mux)
//
// Each route is compiled once; its decisions (Scope, Binding, Fingerprint,
// WriteProblem) are function fields whose nil value means the profile's, so
// that one can be replaced without touching the others.
//
// For a covered request, the middleware
//
//   - parses the Idempotency-Key field as the IETF draft's Structured Field
//     string or as a bare token (Stripe); two fields are a 400;
//   - validates the key (400), finds the tenant (by default a hash of
//     every credential the caller sends, CallerCredentialHeaders() and the
//     TLS client certificate, so callers never share keys; 401 when it
//     sends none, or when a configured source is missing), reads the body under a deadline before
//     anything is reserved (408), and fingerprints method, target and body;
//   - runs the handler once, with the reservation's fencing token in
//     Idempotency-Token, holding its response until the outcome is
//     recorded, so that a client that saw a response can count on a retry
//     replaying it (when the outcome cannot be recorded, the client gets
//     what a retry gets instead); past Route.AnswerWithin the client gets
//     504 while the handler goes on and records its outcome;
//   - never releases a key whose outcome is unknown (the handler called
//     ReportOutcomeUnknown, or panicked after it started): retries get 409
//     outcome_unknown; a handler that calls ReportNotExecuted frees the key;
//   - replays stored responses byte for byte (status, body, an allow-list of
//     headers) with Idempotent-Replayed: true and Original-Request-Id;
//   - answers conflicts (409 in progress, 422 payload mismatch or key
//     reused) and store failures (503 with Retry-After) with RFC 9457
//     problem+json bodies carrying idempotency_key and conflict_type;
//   - says until when a key is retained on every replay and every answer about
//     an existing record: the Idempotency-Key-Expires header (an HTTP-date)
//     and, in problem+json, key_expires_at (RFC 3339, UTC), both the
//     record's expiry truncated to the second. After it a retry with the
//     key would run as new, so clients stop retrying it then
//     (docs/problems.md#key_expires_at).
//
// net/http answers a few requests itself before any handler runs (431 for
// headers past MaxHeaderBytes, 400 for a request that is not HTTP/1.1), in
// text/plain; serve through ProblemListener to have those in problem+json
// too, as the gateway does.
//
// Profiles bundle the choices of four kinds of API: IETF (the draft, the
// default), Stripe (keys per endpoint, every response an outcome), Mobile
// (keys per endpoint, errors in a JSON envelope whose texts can be
// changed) and WorkflowAdmin (keys bound to their action, failures recorded).
// Safe methods (GET, HEAD, OPTIONS, TRACE) pass through untouched.
//
// Responses larger than MaxResponseBytes, event streams and hijacked
// connections pass through as they are written and are recorded without a
// body: a retry gets 409 response_not_stored, never a second execution.
//
// # Tracing
//
// With a tracer provider that records (Options.TracerProvider, else the
// global one once a program sets it), each keyed request gets a span named
// "idem " and its route pattern ("idem POST /charges"): a child of the
// span in the request's context, or else of the caller's trace context in
// its headers (Options.Propagators; W3C traceparent). The handler's request
// carries the span, so that the handler's own spans (an instrumented call
// of its upstream) are its children. Its attributes:
//
//	http.route, http.request.method, http.response.status_code
//	idem.outcome     executed, replayed, unprotected, or the kind of idem's
//	                 own answer (in_progress, payload_mismatch, key_reused,
//	                 previous_failure, outcome_unknown, ...)
//	idem.waited      the request waited for a running holder (Policy.Wait)
//	idem.took_over   it ran after taking the key over from a dead holder
//	idem.scope_hash  hashes of the scope, and of scope and key, as the
//	idem.key_hash    engine's idem.Redactor prints them (keyed when it is
//	                 given a MAC): the raw key and scope appear in no
//	                 attribute
//
// Logs follow the same rule: lines at Info and above name a call by
// scope_hash and key_hash; only Debug lines, and only with
// idem.Redactor.Raw, carry the raw scope and key.
//
// Requests without a key get no span. While the provider records nothing
// (the global provider before it is set, a no-op one) the middleware
// starts no span at all: tracing off costs one comparison per request.
//
// # Reading the code
//
// serve.go is the request path, top to bottom: serve matches the route,
// newCall turns the request into the engine's call, execute runs the
// handler through the engine, finish or answer send the response. What
// they lean on is named by file: request.go (the key, the body, the
// handler's request), attempt.go (one run of the handler, pooled),
// capture.go (the response held until its outcome is recorded),
// storedresponse.go (its encoding in the record), send.go (sending it or
// a stored one), problem.go and envelope.go (idem's own answers),
// profile.go and route.go (the choices), tenant.go (who is calling).
//
// What the middleware costs a handler, and why its path allocates what it
// does, is measured in docs/bench/MIDDLEWARE.md.
package idemhttp
