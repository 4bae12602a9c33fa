// Package metrics holds the gateway's Prometheus metrics: what the
// idemhttp middleware did with each request (fed by Options.Observe), and
// how long each store operation took (a store.Store decorator).
//
// Metric names:
//
//	idem_executions_total{route,code}              the upstream ran for a key
//	idem_replays_total{route,code}                 a stored response was replayed
//	idem_conflicts_total{route,conflict_type}      in_progress, payload_mismatch, ...
//	idem_rejections_total{route,kind}              every answer idem gave itself, one
//	                                               kind per refusal: too_many_keys (429, a
//	                                               tenant at its cap), tenant_required
//	                                               (401), invalid_key (400), ...
//	idem_pass_throughs_total{route}                keyless requests on a route
//	idem_unprotected_total{route}                  ran without the store (fail_open)
//	idem_upstream_errors_total{kind}               unreachable, timeout, error
//	idem_store_operation_duration_seconds{operation,result}
//
// plus the Go runtime and process collectors. Route labels are the
// configured patterns, so their number is bounded by the configuration;
// pass them to New, which creates every series whose label values are
// known at 0, so that increase() sees the first event of each.
package metrics
