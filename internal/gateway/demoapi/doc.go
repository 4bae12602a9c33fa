// Package demoapi is a tiny payments API with no idempotency of its own,
// the upstream of `idem demo` and of the gateway's end-to-end tests.
//
//	POST /charges   {"amount": 1000, "currency": "eur"}
//	                -> 201 {"id": "ch_000001", "count": 1, ...}
//	GET  /stats     -> {"charges": 1, "executions": {"KEY": 1}}
//	GET  /healthz   -> ok
//
// Every POST /charges that reaches it counts as an execution, per
// Idempotency-Key (prefixed by X-User-ID when present), so a client can see
// how often a key really ran. Tests steer it with query parameters:
// ?status=500 answers that status (still counting the execution), and
// ?delay=300ms answers late.
package demoapi
