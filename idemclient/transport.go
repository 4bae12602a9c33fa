package idemclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/idemwire"
)

// HeaderName is the request header that carries the key.
const HeaderName = idemwire.HeaderName

// DefaultSecretHeaders returns the request headers kept out of the outbox
// when Transport.SecretHeaders is nil, in a new slice: the credentials a
// stolen phone or a backup must not give away.
func DefaultSecretHeaders() []string { return slices.Clone(defaultSecretHeaders) }

var (
	defaultSecretHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key"}
	defaultScopeHeaders  = []string{"Authorization", "Cookie", "X-User-ID", "X-Organization-ID"}
)

// DefaultScope returns a digest of the request's Authorization, Cookie,
// X-User-ID and X-Organization-ID headers (whatever tells the server which
// user is calling), or "" when it has none. Servers scope keys per user (and endpoint, which the
// outbox adds itself), so two users may send the same key; the outbox must
// keep both. It is a digest so that no credential is stored.
func DefaultScope(r *http.Request) string {
	h := sha256.New()
	any := false
	for _, name := range defaultScopeHeaders {
		for _, v := range r.Header.Values(name) {
			any = true
			h.Write([]byte(name))
			h.Write([]byte{0})
			h.Write([]byte(v))
			h.Write([]byte{0})
		}
	}
	if !any {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Transport attaches idempotency keys to mutating requests and retries them
// with the same key. A request that carries an Idempotency-Key keeps it
// (one key per user intent: make it from the intent's own ID to choose
// keys); one without gets a random UUID. Its zero value works; nil fields
// have the defaults their comments give.
//
// RoundTrip returns a response only when it is the request's outcome: a
// first answer, or a replay. When there is none it returns an *Error that
// carries the key: ErrInProgress while the first request with the key still
// runs, ErrConflict when the server says the key belongs to another request,
// ErrGaveUp after the last attempt.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts bounds the attempts per request; 0 means 4.
	MaxAttempts int
	// Backoff is the wait before attempt n+1 (n >= 1) when the server sent
	// no Retry-After; nil means 100 ms doubling up to 5 s, with jitter.
	Backoff func(n int) time.Duration
	// Outbox, when set, stores each request before it is sent and removes
	// it once it has an outcome.
	Outbox *Outbox
	// MaxAge is how old a pending request may be and still be sent again
	// by SendPending; 0 means 24 h, the mobile app's key TTL.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Scope tells apart callers that may share a key: the outbox keeps one
	// entry per scope, method, URL and key. nil means DefaultScope.
	Scope func(*http.Request) string
	// SecretHeaders are left out of the outbox. nil means
	// DefaultSecretHeaders(); an empty non-nil slice stores every header.
	// Requests sent again from the outbox get them back from Authorize.
	SecretHeaders []string
	// Authorize, when set, is called before each attempt of a request sent
	// from the outbox (SendPending), to put back the credentials that were
	// not stored; p is the stored request (its Scope and non-secret
	// headers, such as X-User-ID, say whose it is). nil means such
	// requests go without them. An error stops the request and is
	// returned in its Result; it stays pending.
	Authorize func(req *http.Request, p Pending) error
	// PendingConcurrency bounds the requests SendPending sends at once; 0
	// means 4.
	PendingConcurrency int
}

// Key returns the idempotency key the transport used for res, from the
// request it sent. For a request without an outcome, the key is in the
// returned *Error.
func Key(res *http.Response) string {
	if res == nil || res.Request == nil {
		return ""
	}
	return res.Request.Header.Get(HeaderName)
}

// Replayed reports whether the server answered from its stored outcome
// (Idempotent-Replayed: true, or the mobile app's X-Idempotency-Cached: true).
func Replayed(res *http.Response) bool {
	return res.Header.Get(idemwire.ReplayedHeader) == "true" || res.Header.Get("X-Idempotency-Cached") == "true"
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
	if idemwire.SafeMethod(req.Method) {
		return t.base().RoundTrip(req)
	}
	body, err := readAll(req)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(HeaderName)
	if key == "" {
		key = idemwire.NewKey()
	}
	scope := DefaultScope
	if t.Scope != nil {
		scope = t.Scope
	}
	p := Pending{Scope: scope(req), Key: key, Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body, Created: t.now()}
	p.Header.Set(HeaderName, key)
	if t.Outbox != nil {
		if err := t.Outbox.Put(t.stored(p)); err != nil {
			return nil, err
		}
	}
	return t.send(req.Context(), req, p, false)
}

// stored is p without its secret headers.
func (t *Transport) stored(p Pending) Pending {
	secret := t.SecretHeaders
	if secret == nil {
		secret = defaultSecretHeaders
	}
	p.Header = p.Header.Clone()
	for _, h := range secret {
		p.Header.Del(h)
	}
	return p
}

// send tries p until it has an outcome, then clears it from the outbox. A
// request without one stays there for SendPending. With fromOutbox, each
// attempt is authorized by t.Authorize, and a failed connection is not
// retried: the network is down, and SendPending will be called again when
// it is back.
func (t *Transport) send(ctx context.Context, orig *http.Request, p Pending, fromOutbox bool) (*http.Response, error) {
	max := t.MaxAttempts
	if max <= 0 {
		max = 4
	}
	e := &Error{Key: p.Key, Method: p.Method, URL: p.URL, MayHaveRun: fromOutbox, KeyExpires: p.KeyExpires}
	for attempt := 1; ; attempt++ {
		e.Attempts = attempt
		req, err := p.request(ctx, orig)
		if err != nil {
			return nil, err
		}
		if fromOutbox && t.Authorize != nil {
			if err := t.Authorize(req, p); err != nil {
				e.Err = err
				return nil, e
			}
		}
		res, err := t.base().RoundTrip(req)
		var wait time.Duration
		if err != nil {
			offline := unreachable(err)
			if !offline {
				e.MayHaveRun = true
			}
			e.Status, e.Header, e.Body, e.Kind = 0, nil, nil, ""
			e.Err = errors.Join(ErrGaveUp, err)
			if offline && fromOutbox {
				e.Err = errors.Join(ErrOffline, err)
				return nil, e
			}
		} else {
			e.MayHaveRun = true
			body := bufferBody(res)
			v, kind := classify(res, body)
			if exp, ok := keyExpires(res.Header, body, t.now()); ok && v != final {
				e.KeyExpires = exp
				if v != conflict {
					if err := t.noteExpiry(&p, exp); err != nil {
						return nil, errors.Join(e, err)
					}
				}
			}
			switch v {
			case final:
				return res, t.done(p)
			case conflict:
				e.Status, e.Header, e.Body, e.Kind = res.StatusCode, res.Header, body, kind
				e.Err = ErrConflict
				// Sending it again cannot succeed: it leaves the outbox.
				if err := t.done(p); err != nil {
					return nil, errors.Join(e, err)
				}
				return nil, e
			case running:
				e.Err = ErrInProgress
			default:
				e.Err = ErrGaveUp
			}
			e.Status, e.Header, e.Body, e.Kind = res.StatusCode, res.Header, body, kind
			wait = retryAfter(res.Header.Get("Retry-After"))
		}
		if err := t.pause(ctx, e, p, attempt, max, wait); err != nil {
			return nil, err
		}
	}
}

// bufferBody reads res's body into memory, up to 64 KiB, and puts it back
// for the caller. It returns the body when it could be one of idem's
// answers, nil when it is too long or unreadable: then res keeps streaming
// it as it is.
func bufferBody(res *http.Response) []byte {
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10+1))
	if err != nil || len(body) > 64<<10 {
		res.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), res.Body), res.Body}
		return nil
	}
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	return body
}

// noteExpiry records in the outbox that the still pending p's key expires
// at exp, so that SendPending knows it too after a restart.
func (t *Transport) noteExpiry(p *Pending, exp time.Time) error {
	if t.Outbox == nil || exp.Equal(p.KeyExpires) {
		return nil
	}
	old := *p
	p.KeyExpires, p.file = exp, "" // Put writes under the ID
	err := t.Outbox.Put(t.stored(*p))
	if err == nil && old.file != "" && old.file != p.ID()+".json" {
		err = t.Outbox.Remove(old) // an entry of the old layout, named by its key
	}
	return err
}

// pause ends attempt of p, which failed with e, and waits before the next:
// wait when the server said, else the backoff. It returns the error that
// ends the request instead: e after the last attempt, ErrKeyExpired when
// the next attempt would reach a server that forgot the key, the context's
// error.
func (t *Transport) pause(ctx context.Context, e *Error, p Pending, attempt, max int, wait time.Duration) error {
	if attempt >= max && !t.keyGone(e.KeyExpires, 0) {
		return e
	}
	if wait <= 0 && attempt < max {
		wait = t.backoff(attempt)
	}
	if t.keyGone(e.KeyExpires, wait) {
		// The next attempt would reach a server that forgot the key.
		e.Err = errors.Join(ErrKeyExpired, e.Err)
		if err := t.done(p); err != nil {
			return errors.Join(e, err)
		}
		return e
	}
	timer := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		timer.Stop()
		e.Err = errors.Join(e.Err, ctx.Err())
		return e
	case <-timer.C:
	}
	return nil
}

// done clears p from the outbox.
func (t *Transport) done(p Pending) error {
	if t.Outbox == nil {
		return nil
	}
	return t.Outbox.Remove(p)
}

// unreachable reports whether err says the request never left: the
// connection or the name lookup failed.
func unreachable(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
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

// SendPending sends the outbox's pending requests again, each with its key
// (on start-up, or when the network comes back), at most
// PendingConcurrency at a time, and returns one Result per request, oldest
// first: its outcome (the body read into memory, so it can be read after
// the connection is gone) or its error. Requests older than MaxAge are
// dropped unsent with ErrExpired: the server has forgotten their keys, and
// sending them could run them twice. When a connection cannot be made, the
// requests not yet sent are left pending with ErrOffline instead of each
// waiting out its own backoff. The error joins the outbox's own errors and
// ErrOffline when the server was unreachable.
//
// Only one SendPending of a Transport should run at a time; two processes
// sharing an outbox directory may send the same request twice, which the
// server answers with one execution and a replay.
func (t *Transport) SendPending(ctx context.Context) ([]Result, error) {
	if t.Outbox == nil {
		return nil, errors.New("idemclient: no outbox")
	}
	pending, listErr := t.Outbox.List()
	maxAge := t.MaxAge
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	n := t.PendingConcurrency
	if n <= 0 {
		n = 4
	}
	results := make([]Result, len(pending))
	var down atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i, p := range pending {
		results[i].Pending = p
		if err := t.tooOld(p, maxAge); err != nil {
			results[i].Err = err
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].Err = ctx.Err()
			continue
		}
		if down.Load() {
			<-sem
			results[i].Err = offlineError(p)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if down.Load() {
				results[i].Err = offlineError(p)
				return
			}
			res, err := t.sendPending(ctx, p)
			if errors.Is(err, ErrOffline) {
				down.Store(true)
			}
			results[i].Response, results[i].Err = res, err
		}()
	}
	wg.Wait()
	errs := []error{listErr}
	if down.Load() {
		errs = append(errs, ErrOffline)
	}
	return results, errors.Join(errs...)
}

// tooOld removes p from the outbox and returns why when it must not be
// sent again: its key expired on the server (ErrKeyExpired), or it is
// older than maxAge (ErrExpired).
func (t *Transport) tooOld(p Pending, maxAge time.Duration) error {
	var why error
	switch {
	case t.keyGone(p.KeyExpires, 0):
		why = &Error{Key: p.Key, Method: p.Method, URL: p.URL, MayHaveRun: true, KeyExpires: p.KeyExpires, Err: ErrKeyExpired}
	case t.now().Sub(p.Created) > maxAge:
		why = ErrExpired
	default:
		return nil
	}
	if err := t.Outbox.Remove(p); err != nil {
		return errors.Join(why, err)
	}
	return why
}

// sendPending sends p from the outbox, its response's body read whole.
func (t *Transport) sendPending(ctx context.Context, p Pending) (*http.Response, error) {
	res, err := t.send(ctx, nil, p, true)
	if res != nil {
		body, rerr := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return nil, &Error{Key: p.Key, Method: p.Method, URL: p.URL, MayHaveRun: true, Err: errors.Join(ErrGaveUp, rerr)}
		}
	}
	return res, err
}

// offlineError is the Result of a request SendPending did not send. It may
// have run on an earlier attempt, before it was stored or the process died.
func offlineError(p Pending) error {
	return &Error{Key: p.Key, Method: p.Method, URL: p.URL, MayHaveRun: true, Err: ErrOffline}
}
