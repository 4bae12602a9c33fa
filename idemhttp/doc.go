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
//		},
//	})(mux)
//
// For a covered request, the middleware
//
//   - parses the Idempotency-Key field as the IETF draft's Structured Field
//     string or as a bare token (Stripe); two fields are a 400;
//   - validates the key (400), finds the tenant (401 when configured and
//     missing), and fingerprints method, target and body;
//   - runs the handler once, holding its response until the outcome is
//     recorded, so that a client that saw a response can count on a retry
//     replaying it;
//   - replays stored responses byte for byte (status, body, an allow-list of
//     headers) with Idempotent-Replayed: true and Original-Request-Id;
//   - answers conflicts (409 in progress, 422 payload mismatch or key
//     reused) and store failures (503 with Retry-After) with RFC 9457
//     problem+json bodies carrying idempotency_key and conflict_type.
//
// Profiles bundle the choices of the seeds: IETF (default), Stripe, Mobile
// and WorkflowAdmin. Safe methods (GET, HEAD, OPTIONS, TRACE) pass through
// untouched.
//
// Responses larger than MaxResponseBytes, event streams and hijacked
// connections pass through as they are written and are recorded without a
// body: a retry gets 409 response_not_stored, never a second execution.
package idemhttp
