// Command idem is the idem gateway: a reverse proxy that gives any HTTP
// API idempotency keys without code changes. A POST, PUT, PATCH or DELETE
// carrying an Idempotency-Key header runs the upstream at most once per
// key; every retry gets the first response back, byte for byte, with
// Idempotent-Replayed: true and Original-Request-Id.
//
//	idem serve   [--config FILE] [--listen ADDR] [--upstream URL] [--store DSN] [--drain-delay D]
//	idem cleanup [--store DSN | --admin URL] [--dry-run] [--batch N]
//	idem inspect [--store DSN | --admin URL] [--scope S] --key K
//	idem release --admin URL [--scope S] --key K
//	idem migrate --store postgres://...
//	idem demo    [--listen ADDR] [--api-listen ADDR] [--data DIR]
//	idem version (or idem --version)
//
// --admin commands work through a running gateway's admin API, with its
// admin token (--admin-token or IDEM_ADMIN_TOKEN): the way to reach an
// embedded store the gateway holds locked. Exit status: 0, 1 for a
// failure, 2 for a command line that could not be understood; -h prints a
// command's flags and exits 0.
//
// # Configuration
//
// serve reads a YAML file (--config, or IDEM_CONFIG; see package
// internal/gateway/config for every field), then IDEM_LISTEN, IDEM_UPSTREAM,
// IDEM_STORE, IDEM_ADMIN_LISTEN, IDEM_ADMIN_TOKEN, IDEM_LOG_FORMAT and
// IDEM_LOG_LEVEL, IDEM_DRAIN_DELAY and IDEM_UPSTREAM_READY, then the flags:
// flags win over the environment, which wins over the file. Without a
// store, records go to the embedded store in ./idem-data
// (file:./idem-data); run from / (as systemd runs services) they go to
// $STATE_DIRECTORY/idem-data, else /var/lib/idem/idem-data. A PostgreSQL
// store is migrated at start-up unless migrate: false (or
// --migrate=false).
//
// # What the gateway adds
//
// Every request gets an X-Request-Id (a sane one from the client is kept),
// echoed on the response. The Idempotency-Key header is forwarded, so the
// upstream may dedupe too. Keyed requests are detached from their client's
// connection: if the client hangs up, the upstream call still completes and
// is recorded, and the retry replays it. Upstream failures are 502 (504 on
// timeout) problem+json; when the upstream could not even be reached, the
// key is released so the retry runs.
//
// # Traces
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) set, the
// gateway sends OpenTelemetry traces over OTLP/HTTP: a server span per
// request under the caller's traceparent, for a keyed request a span of
// idem's (route, outcome, whether it waited, scope and key as hashes only,
// keyed by the secret when one is set: docs/ISOLATION.md) with the store operations and the upstream call as its children,
// and the trace context carried on to the upstream in traceparent. The
// standard variables choose the rest (OTEL_SERVICE_NAME, default idem;
// OTEL_TRACES_SAMPLER; OTEL_PROPAGATORS; the exporter's headers and TLS);
// a value the gateway cannot use is refused at start. Without an exporter
// configured, or with OTEL_TRACES_EXPORTER=none, tracing is off and costs
// nothing. The last spans are sent at shutdown. See package
// internal/gateway/tracing.
//
// # Admin listener
//
// admin_listen (default 127.0.0.1:9090; "off" disables it) serves
// /healthz (liveness: 200 while the process serves), /readyz (readiness:
// 200 when the store answers and the upstream is reachable, 503 when not
// or while draining; the raw error only with the admin token), /metrics (Prometheus: idem_executions_total,
// idem_replays_total, idem_conflicts_total{conflict_type},
// idem_rejections_total{kind}, idem_pass_throughs_total,
// idem_upstream_errors_total, idem_store_operation_duration_seconds{operation},
// Go and process metrics) and, with admin_token set (Authorization: Bearer
// TOKEN): the admin page at /, its API (/api/stats, /api/keys,
// /api/keys/release, /api/cleanup) and /debug/pprof/. Without a token those
// are off, and a listener reachable from other hosts is warned about at
// start. See package internal/gateway.
//
// # Shutdown
//
// On SIGINT or SIGTERM /readyz turns 503 at once; the gateway keeps serving
// for drain_delay (0 by default) so that a load balancer notices, then stops
// accepting, lets in-flight requests finish and record their outcomes (up to
// shutdown_timeout, 30 s), closes the store and sends the spans not sent
// yet. A second signal exits at once.
package main
