// Package gateway assembles the idem gateway's HTTP handlers: the reverse
// proxy (httputil.ReverseProxy wrapped in the idemhttp middleware) and the
// admin listener (/healthz, /readyz, /metrics, the admin page and its
// token-protected API, pprof; see Admin).
//
// The proxy
//
//   - gives every request an X-Request-Id (kept when the client sent a sane
//     one) and echoes it on the response;
//   - scopes keys by the caller's tenant, picked as the configuration says
//     (Tenant: a header set by an authenticating proxy, a hash of a
//     session cookie or of several sources, or by default a hash of every
//     credential the caller sends; 401 when they are missing);
//   - forwards the Idempotency-Key header, so the upstream may dedupe too,
//     with the execution's fencing token in Idempotency-Token, and sets
//     X-Forwarded-For/-Host/-Proto (inbound ones are not trusted);
//   - detaches keyed requests from the client's connection: a client that
//     hangs up does not cancel the upstream call, whose outcome is then
//     recorded and replayed to the retry, instead of being lost and run
//     again;
//   - bounds every upstream call by upstream_deadline; a keyed call slower
//     than its route's upstream_timeout answers its client 504 and goes on
//     in the background, its outcome recorded and replayed to retries;
//   - answers upstream failures with 502 (504 on a timeout) in the shape of
//     the route's profile, and classifies them in one place (classify):
//     when the upstream could not even be dialled, nothing ran, so the key
//     is released whatever the profile caches; once the request was sent,
//     the outcome is unknown and the key is never released (a body cut off
//     makes ReverseProxy panic with http.ErrAbortHandler, which the
//     middleware records the same way);
//   - at shutdown, cuts off the upstream calls still running past
//     shutdown_timeout (Abort), so their keys end as outcome unknown;
//   - given a tracer provider (Options.TracerProvider), traces every
//     request (otelhttp's server span, the middleware's span of a keyed
//     call, otelhttp's client span around the upstream call) and carries
//     the trace context to the upstream; without one it makes no span and
//     passes the caller's traceparent on as it came.
package gateway
