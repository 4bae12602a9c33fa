// Package tracing is the gateway's OpenTelemetry tracing: a tracer provider
// set up from the standard OTEL_* environment variables (FromEnv), and the
// spans of the store operations (WrapStore). The middleware's spans and the
// upstream call's are made by idemhttp and the gateway package, from the
// provider FromEnv returns.
//
// Tracing is on when OTEL_TRACES_EXPORTER is otlp, or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; it is off when none is, with OTEL_TRACES_EXPORTER=none and with
// OTEL_SDK_DISABLED=true. Spans go to the endpoint over OTLP/HTTP
// (protobuf), batched; the exporter reads its own variables (endpoint,
// OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE) as the
// OpenTelemetry specification says. OTEL_SERVICE_NAME (default idem) and
// OTEL_RESOURCE_ATTRIBUTES describe the process; OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG choose the sampler (default
// parentbased_always_on); OTEL_PROPAGATORS the propagators (default
// tracecontext,baggage). A value that cannot mean what was written (an
// exporter or protocol the gateway does not speak, an unknown sampler, a
// ratio outside [0, 1], an endpoint that is not an http(s) URL) is refused
// at start, naming the fix.
//
// Store spans are children of a request's spans only: background store
// work (lease renewals, cleanup) runs outside any trace and makes none.
package tracing
