package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/httpfield"
)

// Options configures New.
type Options struct {
	// Upstream is the API behind the gateway. Required.
	Upstream *url.URL
	// Engine runs the middleware. Required.
	Engine *idem.Engine
	// Middleware are the idemhttp options (routes, tenant, limits).
	Middleware idemhttp.Options
	// Transport reaches the upstream; nil means NewTransport(UpstreamDeadline).
	Transport http.RoundTripper
	// UpstreamDeadline bounds every upstream call, the body included: a
	// keyed call cut off by it has an unknown outcome. 0 means 5 minutes.
	UpstreamDeadline time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// OnUpstreamError, when set, is told of every failed upstream call:
	// "unreachable" (nothing was sent), "timeout" or "error".
	OnUpstreamError func(kind string)
	// TracerProvider, when set, traces every request: a server span
	// (otelhttp) under the caller's trace context, the middleware's span
	// of a keyed call under it, and a client span around the upstream call
	// whose context travels to the upstream in traceparent. nil means no
	// tracing: the proxy makes no span and passes the caller's traceparent
	// on as it came.
	TracerProvider trace.TracerProvider
	// Propagators read the caller's trace context and write it to the
	// upstream; nil means W3C trace context and baggage.
	Propagators propagation.TextMapPropagator
}

// Proxy is the gateway's main handler.
type Proxy struct {
	handler     http.Handler
	reqIDHeader string
	log         *slog.Logger
	inflight    sync.WaitGroup // requests being served, and upstream calls going on after their client was answered
	calls       calls          // upstream calls in flight, for the deadline and Abort
	routes      *idemhttp.Routes
}

// Routes is the compiled route table, for the admin API: it finds a key's
// scope as the middleware does.
func (p *Proxy) Routes() *idemhttp.Routes { return p.routes }

// ErrShutdown is how an upstream call cut off by Abort failed.
var ErrShutdown = errors.New("gateway: shut down before the upstream answered")

// NewTransport returns the upstream transport: http.DefaultTransport's
// settings with enough idle connections per host for a gateway (the default
// of 2 leaves thousands of sockets in TIME_WAIT under load), and a bound on
// the wait for response headers.
func NewTransport(headerTimeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = headerTimeout
	return t
}

// New returns the proxy: the middleware in front of a ReverseProxy to the
// upstream, under otelhttp's server span when tracing is on.
func New(opts Options) (*Proxy, error) {
	if opts.Upstream == nil || opts.Engine == nil {
		return nil, errors.New("gateway: Upstream and Engine are required")
	}
	opts = opts.withDefaults()
	p := &Proxy{reqIDHeader: opts.Middleware.RequestIDHeader, log: opts.Logger}
	p.calls = newCalls(opts.UpstreamDeadline)
	routes, err := idemhttp.Compile(opts.Engine, opts.Middleware)
	if err != nil {
		return nil, err
	}
	p.routes = routes
	p.handler = routes.Wrap(p.bounded(p.reverseProxy(opts)))
	if tp := opts.TracerProvider; tp != nil {
		p.handler = otelhttp.NewHandler(p.handler, "idem", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(opts.Propagators),
			otelhttp.WithMeterProvider(noop.NewMeterProvider()))
	}
	return p, nil
}

// withDefaults returns o with its nil and zero fields set to their
// defaults, the middleware's request ID header and logger to the
// gateway's, and, when tracing is on, the transport wrapped in otelhttp's
// client span and the middleware tracing with the same provider.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.UpstreamDeadline <= 0 {
		o.UpstreamDeadline = 5 * time.Minute
	}
	if o.Transport == nil {
		o.Transport = NewTransport(o.UpstreamDeadline)
	}
	if o.OnUpstreamError == nil {
		o.OnUpstreamError = func(string) {}
	}
	if tp := o.TracerProvider; tp != nil {
		if o.Propagators == nil {
			o.Propagators = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
		o.Transport = otelhttp.NewTransport(o.Transport, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(o.Propagators),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "upstream " + r.Method }))
		o.Middleware.TracerProvider, o.Middleware.Propagators = tp, o.Propagators
	}
	if o.Middleware.RequestIDHeader == "" {
		o.Middleware.RequestIDHeader = "X-Request-Id"
	}
	if o.Middleware.Logger == nil {
		o.Middleware.Logger = o.Logger
	}
	return o
}

// reverseProxy returns the ReverseProxy to the upstream.
func (p *Proxy) reverseProxy(opts Options) *httputil.ReverseProxy {
	upstream, onErr := opts.Upstream, opts.OnUpstreamError
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			// Idempotency-Key, Idempotency-Token (the reservation's fencing
			// token, set by the middleware) and X-Request-Id travel on.
			neverResend(pr.Out)
			// The middleware read the body before reserving, and its
			// GetBody gives it back as a reader the Transport knows to be
			// in memory; the one ReverseProxy wraps the body in hides that,
			// and the Transport then flushes the headers before the body:
			// one more system call and packet to the upstream per request.
			if pr.In.GetBody != nil && pr.Out.Body != nil {
				if b, err := pr.In.GetBody(); err == nil {
					pr.Out.Body = b
				}
			}
		},
		Transport: opts.Transport,
		// ReverseProxy's own messages would go to the standard logger;
		// the body errors among them are logged by logBodyErrors, with
		// the key and request ID.
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		// Without a pool, every request allocates a 32 KiB copy buffer,
		// most of what the gateway allocates (docs/bench/GATEWAY.md).
		BufferPool: bufferPool{},
		ModifyResponse: func(res *http.Response) error {
			// The gateway already set the request ID on the response; an
			// upstream that echoes it must not make it appear twice.
			if id := res.Request.Header.Get(p.reqIDHeader); id != "" && res.Header.Get(p.reqIDHeader) == id {
				res.Header.Del(p.reqIDHeader)
			}
			logBodyErrors(res, p.log, p.reqIDHeader)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.upstreamFailed(w, r, err, onErr, upstream)
		},
	}
}

// upstreamFailed answers an upstream call that got no complete answer, in
// the shape of the route's profile, and tells the middleware whether the
// call was sent.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error, onErr func(string), upstream *url.URL) {
	if p.calls.isAborted() && r.Context().Err() != nil {
		err = fmt.Errorf("%w: %w", ErrShutdown, err)
	}
	e := classify(err)
	onErr(e.metric)
	p.log.Warn("idem: upstream failed", "url", upstream.Redacted(), "path", r.URL.Path,
		"request_id", r.Header.Get(p.reqIDHeader), "sent", e.sent, "err", err)
	if e.sent {
		idemhttp.ReportOutcomeUnknown(w)
	} else {
		idemhttp.ReportNotExecuted(w)
	}
	pr := &idemhttp.Problem{Kind: e.kind, Detail: e.detail}
	if k, ok, perr := httpfield.ParseKey(keyValues(r.Header)); ok && perr == nil {
		pr.Key = k
	}
	idemhttp.WriteProblem(w, r, pr)
}

// upstreamError is how an upstream call failed.
type upstreamError struct {
	sent   bool // the request may have reached the upstream
	kind   idemhttp.Kind
	metric string
	detail string
}

// classify says how an upstream call that got no complete answer ended, in
// the one place that decides it: not sent (the dial failed: nothing reached
// the upstream, the key is released and a retry runs), or sent without a
// complete answer (a timeout, a reset, a shutdown: the outcome is unknown
// and the key is never released). A body cut off after the headers does
// not come here: ReverseProxy panics with http.ErrAbortHandler, which the
// middleware records as an unknown outcome.
func classify(err error) upstreamError {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return upstreamError{kind: idemhttp.KindUpstreamUnavailable, metric: "unreachable",
			detail: "the upstream could not be reached; nothing was executed"}
	}
	var ne net.Error
	switch {
	case errors.Is(err, ErrShutdown):
		return upstreamError{sent: true, kind: idemhttp.KindUpstreamUnavailable, metric: "error",
			detail: "the gateway shut down before the upstream answered: the call may have run, so its outcome is unknown"}
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return upstreamError{sent: true, kind: idemhttp.KindUpstreamTimeout, metric: "timeout",
			detail: "the upstream did not answer in time: the call may have run, so its outcome is unknown"}
	}
	return upstreamError{sent: true, kind: idemhttp.KindUpstreamUnavailable, metric: "error",
		detail: "the upstream failed to answer: the call may have run, so its outcome is unknown"}
}

// bounded runs an upstream call under the upstream deadline and Abort, and
// counts it in flight: under Route.AnswerWithin it may go on after its
// client was answered.
func (p *Proxy) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.inflight.Add(1)
		// A keyed call's outcome is recorded after its handler returns:
		// it counts in flight until its run ends (the run context's end,
		// once the engine wrote the record or the lease was lost), so
		// that Wait lets the store close only after an aborted call was
		// recorded as outcome unknown.
		if _, keyed := idem.TokenFromContext(r.Context()); keyed {
			context.AfterFunc(r.Context(), p.inflight.Done)
		} else {
			defer p.inflight.Done()
		}
		c, end := p.calls.start(r.Context())
		defer end()
		next.ServeHTTP(w, r.WithContext(c))
	})
}

// Abort cuts off the upstream calls still running, so that their keys are
// recorded as outcome unknown rather than left in progress: for shutdown,
// once in-flight requests had their time.
func (p *Proxy) Abort() { p.calls.abort() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.inflight.Add(1)
	defer p.inflight.Done()

	id := r.Header.Get(p.reqIDHeader)
	if !saneID(id) || len(r.Header.Values(p.reqIDHeader)) > 1 {
		id = httpfield.NewRequestID()
		// Set on the request's own header map: nothing reads it after
		// the handler, and the middleware and ReverseProxy copy it before
		// they change it. A clone was a map and a slice per request.
		r.Header.Set(p.reqIDHeader, id)
	}
	w.Header().Set(p.reqIDHeader, id)
	if !idemhttp.SafeMethod(r.Method) && len(r.Header.Values(idemhttp.HeaderName)) > 0 {
		// The outcome of a keyed request is recorded even if its client
		// hangs up; the upstream timeout still bounds it.
		r = r.WithContext(context.WithoutCancel(r.Context()))
	}
	p.handler.ServeHTTP(w, r)
}

// Wait waits until no request is being served, or ctx is done. After
// http.Server.Shutdown gave up, it lets the handlers still running (whose
// contexts are detached) record their outcomes before the store closes.
func (p *Proxy) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// saneID reports whether a client's request ID can be passed on: short and
// printable ASCII, since it ends up in logs and in stored records.
func saneID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// bufferPool recycles ReverseProxy's copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// neverResend stops http.Transport from sending the upstream request a
// second time. The transport counts a request that carries Idempotency-Key
// (or X-Idempotency-Key) as safe to replay, and replays it when a reused
// connection breaks after the request was written (a reset while it waits
// for the answer): the upstream then runs one client request twice, which
// is exactly what the gateway exists to prevent (the fault suite saw it on
// every store). Keeping the headers under their lower-case names hides
// them from that check and not from the upstream: header names are
// case-insensitive on the wire, and HTTP/2 sends them lower-case anyway.
// The transport still retries a request it has not written at all.
func neverResend(out *http.Request) {
	for _, name := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := out.Header[name]; ok {
			delete(out.Header, name)
			out.Header[strings.ToLower(name)] = v
		}
	}
}

// keyValues returns the Idempotency-Key values of an upstream request,
// which neverResend keeps under the lower-case name.
func keyValues(h http.Header) []string {
	if v, ok := h[strings.ToLower(idemhttp.HeaderName)]; ok {
		return v
	}
	return h.Values(idemhttp.HeaderName)
}
