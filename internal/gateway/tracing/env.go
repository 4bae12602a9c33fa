package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Setup is the gateway's tracing as the environment configures it.
type Setup struct {
	// TracerProvider is nil when tracing is off.
	TracerProvider trace.TracerProvider
	// Propagators read and write the W3C trace context (and baggage).
	Propagators propagation.TextMapPropagator
	// Endpoint, Service and Sampler describe the setup for the start log.
	Endpoint, Service, Sampler string

	sdk *sdktrace.TracerProvider
}

// Shutdown sends the spans not sent yet and stops the exporter. It is a
// no-op when tracing is off.
func (s *Setup) Shutdown(ctx context.Context) error {
	if s == nil || s.sdk == nil {
		return nil
	}
	return s.sdk.Shutdown(ctx)
}

// FromEnv sets tracing up from the OTEL_* variables getenv reads (see the
// package documentation), and returns an error naming the fix for a value
// it cannot use. version is the service.version of the spans' resource.
func FromEnv(ctx context.Context, getenv func(string) string, version string) (*Setup, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	prop, err := propagators(env("OTEL_PROPAGATORS"))
	if err != nil {
		return nil, err
	}
	s := &Setup{Propagators: prop}
	on, err := enabled(env)
	if err != nil || !on {
		return s, err
	}
	if s.Endpoint, err = endpoint(env); err != nil {
		return nil, err
	}
	sampler, name, err := samplerFrom(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	s.Sampler = name
	s.Service = env("OTEL_SERVICE_NAME")
	if s.Service == "" {
		s.Service = "idem"
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// over the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "idem"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w (write key=value pairs separated by commas)", err)
	}
	// The exporter reads its endpoint, headers, timeout, compression and
	// certificates from the environment itself.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	s.sdk = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	s.TracerProvider = s.sdk
	return s, nil
}

// enabled says whether the environment asks for traces.
func enabled(env func(string) string) (bool, error) {
	if v := env("OTEL_SDK_DISABLED"); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("OTEL_SDK_DISABLED=%q: set it to true or false", v)
		}
		if off {
			return false, nil
		}
	}
	switch exp := strings.ToLower(env("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the gateway exports traces over OTLP only; set it to otlp (with OTEL_EXPORTER_OTLP_ENDPOINT) or none", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := env(k); p != "" && p != "http/protobuf" {
			return false, fmt.Errorf("%s=%q: the gateway sends OTLP over HTTP with protobuf; set it to http/protobuf (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318)", k, p)
		}
		if env(k) != "" {
			break // the traces' own setting wins over the general one
		}
	}
	return true, nil
}

// endpoint returns where the spans go, for the log, checking that the
// exporter can use it: the exporter reports a bad URL only when it first
// sends, and then falls back to localhost.
func endpoint(env func(string) string) (string, error) {
	k, v, path := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), ""
	if v == "" {
		k, v, path = "OTEL_EXPORTER_OTLP_ENDPOINT", env("OTEL_EXPORTER_OTLP_ENDPOINT"), "/v1/traces"
	}
	if v == "" {
		return "http://localhost:4318/v1/traces", nil // the specification's default
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%q: write the collector's OTLP/HTTP URL, such as http://127.0.0.1:4318", k, v)
	}
	return strings.TrimSuffix(u.Redacted(), "/") + path, nil
}

// samplerFrom returns the sampler OTEL_TRACES_SAMPLER names, and its name.
func samplerFrom(name, arg string) (sdktrace.Sampler, string, error) {
	name = strings.ToLower(name)
	if name == "" {
		name = "parentbased_always_on"
	}
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: write the share of traces to sample, from 0 to 1 (such as 0.25)", arg)
		}
		return r, nil
	}
	var s sdktrace.Sampler
	base, parent := strings.CutPrefix(name, "parentbased_")
	switch base {
	case "always_on":
		s = sdktrace.AlwaysSample()
	case "always_off":
		s = sdktrace.NeverSample()
	case "traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, "", err
		}
		s, name = sdktrace.TraceIDRatioBased(r), name+" "+strconv.FormatFloat(r, 'g', -1, 64)
	default:
		return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%q: use always_on, always_off, traceidratio, parentbased_always_on (the default), parentbased_always_off or parentbased_traceidratio", name)
	}
	if parent {
		s = sdktrace.ParentBased(s)
	}
	return s, name, nil
}

// propagators returns the propagators OTEL_PROPAGATORS names.
func propagators(v string) (propagation.TextMapPropagator, error) {
	if v == "" {
		v = "tracecontext,baggage"
	}
	var ps []propagation.TextMapPropagator
	for _, name := range strings.Split(v, ",") {
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: the gateway speaks tracecontext (W3C traceparent), baggage and none; %q is not among them", v, name)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}
