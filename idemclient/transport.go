package idemclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/idem-dev/idem/idemhttp"
)

// HeaderName is the request header that carries the key.
const HeaderName = idemhttp.HeaderName

// Transport attaches idempotency keys to mutating requests and retries them
// with the same key. Its zero value works; nil fields have the defaults
// their comments give.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// NewKey makes a key for a request that has none; nil means a random
	// UUID, as seed 001 recommends.
	NewKey func() string
	// MaxAttempts bounds the attempts per request; 0 means 4.
	MaxAttempts int
	// Backoff is the wait before attempt n (n >= 1) when the server sent
	// no Retry-After; nil means 100 ms doubling up to 5 s, with jitter.
	Backoff func(n int) time.Duration
	// Outbox, when set, stores each request before it is sent and removes
	// it once a final response arrives.
	Outbox *Outbox
	// MaxAge is how old a pending request may be and still be sent again
	// by SendPending; 0 means 24 h, the server's key TTL (seed 001).
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Option configures NewTransport.
type Option func(*Transport)

// WithOutbox keeps pending requests in o.
func WithOutbox(o *Outbox) Option { return func(t *Transport) { t.Outbox = o } }

// WithMaxAttempts bounds the attempts per request.
func WithMaxAttempts(n int) Option { return func(t *Transport) { t.MaxAttempts = n } }

// NewTransport returns a Transport over base.
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	t := &Transport{Base: base}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Key returns the idempotency key the transport used for req's response,
// from the request it sent.
func Key(res *http.Response) string {
	if res == nil || res.Request == nil {
		return ""
	}
	return res.Request.Header.Get(HeaderName)
}

// Replayed reports whether the server answered from its stored outcome
// (Idempotent-Replayed: true, or seed 001's X-Idempotency-Cached: true).
func Replayed(res *http.Response) bool {
	return res.Header.Get("Idempotent-Replayed") == "true" || res.Header.Get("X-Idempotency-Cached") == "true"
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if idemhttp.SafeMethod(req.Method) {
		return t.base().RoundTrip(req)
	}
	body, err := readAll(req)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(HeaderName)
	if key == "" {
		if t.NewKey != nil {
			key = t.NewKey()
		} else {
			key = uuid.NewString()
		}
	}
	p := Pending{Key: key, Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body, Created: t.now()}
	p.Header.Set(HeaderName, key)
	if t.Outbox != nil {
		if err := t.Outbox.Put(p); err != nil {
			return nil, err
		}
	}
	return t.send(req.Context(), req, p)
}

// send tries p until a final response, then clears it from the outbox. A
// request that never got one stays there for SendPending.
func (t *Transport) send(ctx context.Context, orig *http.Request, p Pending) (*http.Response, error) {
	max := t.MaxAttempts
	if max <= 0 {
		max = 4
	}
	var lastErr error
	for attempt := 1; ; attempt++ {
		req, err := p.request(ctx, orig)
		if err != nil {
			return nil, err
		}
		res, err := t.base().RoundTrip(req)
		if err == nil && !retryable(res) {
			if t.Outbox != nil {
				if rerr := t.Outbox.Remove(p.Key); rerr != nil {
					res.Body.Close()
					return nil, rerr
				}
			}
			return res, nil
		}
		if attempt >= max || ctx.Err() != nil {
			if err != nil {
				return nil, fmt.Errorf("idemclient: %s %s (key %s) after %d attempts: %w", p.Method, p.URL, p.Key, attempt, err)
			}
			return res, nil // the last retryable answer; the request stays pending
		}
		wait := t.backoff(attempt)
		if err != nil {
			lastErr = err
		} else {
			if ra := retryAfter(res.Header.Get("Retry-After")); ra > 0 {
				wait = ra
			}
			io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, errors.Join(ctx.Err(), lastErr)
		case <-timer.C:
		}
	}
}

// retryable answers say nothing ran, or that the first run is still going:
// the same key is safe to send again. A 409 is retried only when it says
// when to come back (idem's in_progress carries Retry-After); a 409 that is
// the operation's own stored outcome is final.
func retryable(res *http.Response) bool {
	switch res.StatusCode {
	case http.StatusConflict:
		return res.Header.Get("Retry-After") != ""
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (t *Transport) backoff(n int) time.Duration {
	if t.Backoff != nil {
		return t.Backoff(n)
	}
	d := 100 * time.Millisecond << min(n-1, 6)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), time.Minute)
	}
	return 0
}

func (p *Pending) request(ctx context.Context, orig *http.Request) (*http.Request, error) {
	var req *http.Request
	var err error
	if orig != nil {
		req = orig.Clone(ctx)
	} else if req, err = http.NewRequestWithContext(ctx, p.Method, p.URL, nil); err != nil {
		return nil, err
	}
	req.Header = p.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(HeaderName, p.Key)
	req.Body = io.NopCloser(bytes.NewReader(p.Body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p.Body)), nil }
	req.ContentLength = int64(len(p.Body))
	if len(p.Body) == 0 {
		req.Body = http.NoBody
	}
	return req, nil
}

func readAll(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// SendPending sends every pending request of the outbox again with its key
// (seed 001's retryPendingRequests: on start-up, or when the network comes
// back). Requests older than MaxAge are dropped unsent: the server has
// forgotten their keys, and sending them could run them twice. It returns
// the responses it got, by key; their bodies are closed.
func (t *Transport) SendPending(ctx context.Context) (map[string]int, error) {
	if t.Outbox == nil {
		return nil, errors.New("idemclient: no outbox")
	}
	pending, err := t.Outbox.List()
	maxAge := t.MaxAge
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	statuses := map[string]int{}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pending {
		if t.now().Sub(p.Created) > maxAge {
			if err := t.Outbox.Remove(p.Key); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		res, err := t.send(ctx, nil, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses[p.Key] = res.StatusCode
	}
	return statuses, errors.Join(errs...)
}
