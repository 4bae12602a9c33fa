// Package gateway assembles the idem gateway's HTTP handlers: the reverse
// proxy (httputil.ReverseProxy wrapped in the idemhttp middleware) and the
// admin listener (/healthz, /metrics, /keys).
//
// The proxy
//
//   - gives every request an X-Request-Id (kept when the client sent a sane
//     one) and echoes it on the response;
//   - forwards the Idempotency-Key header, so the upstream may dedupe too,
//     and sets X-Forwarded-For/-Host/-Proto (inbound ones are not trusted);
//   - detaches keyed requests from the client's connection: a client that
//     hangs up does not cancel the upstream call, whose outcome is then
//     recorded and replayed to the retry, instead of being lost and run
//     again;
//   - answers upstream failures with 502 (504 on a timeout) problem+json.
//     When the upstream could not even be dialled, nothing ran, so the key
//     is released whatever the profile caches (see errNotSent).
package gateway
