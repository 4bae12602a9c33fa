package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
)

// Options configures New.
type Options struct {
	// Upstream is the API behind the gateway. Required.
	Upstream *url.URL
	// Engine runs the middleware. Required.
	Engine *idem.Engine
	// Middleware are the idemhttp options (routes, tenant, limits).
	Middleware idemhttp.Options
	// Transport reaches the upstream; nil means NewTransport(60 s).
	Transport http.RoundTripper
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// OnUpstreamError, when set, is told of every failed upstream call:
	// "unreachable" (nothing was sent), "timeout" or "error".
	OnUpstreamError func(kind string)
}

// Proxy is the gateway's main handler.
type Proxy struct {
	handler     http.Handler
	reqIDHeader string
	log         *slog.Logger
	inflight    sync.WaitGroup
}

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

// New returns the proxy.
func New(opts Options) (*Proxy, error) {
	if opts.Upstream == nil || opts.Engine == nil {
		return nil, errors.New("gateway: Upstream and Engine are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport(60 * time.Second)
	}
	p := &Proxy{reqIDHeader: opts.Middleware.RequestIDHeader, log: opts.Logger}
	if p.reqIDHeader == "" {
		p.reqIDHeader = "X-Request-Id"
	}
	opts.Middleware.RequestIDHeader = p.reqIDHeader
	if opts.Middleware.Logger == nil {
		opts.Middleware.Logger = opts.Logger
	}
	onErr := opts.OnUpstreamError
	if onErr == nil {
		onErr = func(string) {}
	}
	upstream := opts.Upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			// Idempotency-Key and X-Request-Id travel on as they are.
		},
		Transport: opts.Transport,
		// Without a pool, every request allocates a 32 KiB copy buffer:
		// measured as 62% of the gateway's allocated bytes.
		BufferPool: bufferPool{},
		ModifyResponse: func(res *http.Response) error {
			// The gateway already set the request ID on the response; an
			// upstream that echoes it must not make it appear twice.
			if id := res.Request.Header.Get(p.reqIDHeader); id != "" && res.Header.Get(p.reqIDHeader) == id {
				res.Header.Del(p.reqIDHeader)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				onErr("unreachable")
				p.log.Warn("idem: upstream unreachable", "url", upstream.Redacted(), "err", err)
				// Nothing reached the upstream: free the key, so a retry
				// runs once it is back, even under profiles that keep
				// every status (stripe).
				idemhttp.NotExecuted(w)
				writeUpstreamProblem(w, http.StatusBadGateway, r.Header.Get(idemhttp.HeaderName),
					"the upstream could not be reached; nothing was executed")
				return
			}
			status, kind := http.StatusBadGateway, "error"
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				status, kind = http.StatusGatewayTimeout, "timeout"
			}
			onErr(kind)
			p.log.Warn("idem: upstream failed", "url", upstream.Redacted(), "path", r.URL.Path,
				"request_id", r.Header.Get(p.reqIDHeader), "err", err)
			detail := "the upstream failed to answer"
			if status == http.StatusGatewayTimeout {
				detail = "the upstream did not answer in time"
			}
			writeUpstreamProblem(w, status, r.Header.Get(idemhttp.HeaderName), detail)
		},
	}
	mw, err := idemhttp.New(opts.Engine, opts.Middleware)
	if err != nil {
		return nil, err
	}
	p.handler = mw(rp)
	return p, nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.inflight.Add(1)
	defer p.inflight.Done()

	id := r.Header.Get(p.reqIDHeader)
	if !saneID(id) || len(r.Header.Values(p.reqIDHeader)) > 1 {
		id = idemhttp.NewRequestID()
		// A shallow copy with its own headers: the body, URL and the rest
		// are not changed, so a deep Clone per request is not needed.
		r = r.WithContext(r.Context())
		r.Header = r.Header.Clone()
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

// writeUpstreamProblem answers an upstream failure as RFC 9457
// problem+json, in the shape of idem's own problems.
func writeUpstreamProblem(w http.ResponseWriter, status int, key, detail string) {
	p := &idemhttp.Problem{Kind: idemhttp.KindUpstreamUnavailable, Status: status, Detail: detail}
	if status == http.StatusGatewayTimeout {
		p.Kind = idemhttp.KindUpstreamTimeout
	}
	if key != "" {
		if k, ok, perr := idemhttp.ParseKey([]string{key}); ok && perr == nil {
			p.Key = k
		}
	}
	idemhttp.WriteProblemJSON(w, p)
}

// bufferPool recycles ReverseProxy's copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
