package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/store"
)

// State is a record's state, re-exported from package store.
type State = store.State

// The states of a record.
const (
	InProgress = store.InProgress
	Succeeded  = store.Succeeded
	Failed     = store.Failed
)

// Call names one idempotent call.
type Call struct {
	// Scope is the namespace of the key: a tenant, an endpoint, a task type
	// or a combination. Two scopes never see each other's records.
	Scope string
	// Key is the client's idempotency key; it is trimmed and validated.
	Key string
	// Fingerprint identifies the request (see HashJSON and friends). A key
	// reused with another fingerprint is ErrFingerprintMismatch. Empty means
	// no check.
	Fingerprint string
	// Binding is the action and target the key is bound to (seed 000:
	// "cancel_workflow wf-42"). A key reused with another binding is
	// ErrKeyReused. Empty means no binding.
	Binding string
	// RequestID identifies this call; replays report the first call's.
	RequestID string
}

// Result is the outcome of Do.
type Result struct {
	// Value is the operation's result: fresh, or replayed from the store.
	// For a failure kept by OnFailureCache or OnFailureConflict it is the
	// stored failure.
	Value []byte
	// Replayed is true when the operation did not run for this call.
	Replayed bool
	// State is Succeeded or Failed.
	State State
	// RequestID and CreatedAt are those of the first call.
	RequestID string
	CreatedAt time.Time
	// TookOver is true when this call ran the operation after taking the key
	// over from a holder whose lease ran out (OnStaleRetry).
	TookOver bool
	// Unprotected is true when the operation ran without the store's
	// protection because the store failed and the policy is
	// OnStoreErrorFailOpen.
	Unprotected bool
}

// Func is the operation behind a key. Its context is canceled, with cause
// ErrLeaseLost, if another caller takes the key over.
type Func func(ctx context.Context) ([]byte, error)

// Engine runs operations at most once per (scope, key). It is safe for
// concurrent use.
type Engine struct {
	store  store.Store
	policy Policy
	*shared
}

// shared is what engines derived with WithPolicy have in common.
type shared struct {
	now    func() time.Time
	logger *slog.Logger
	// completeTimeout bounds the store writes that end a call, which run
	// even when the caller's context is canceled.
	completeTimeout time.Duration
	keyHash         func(scope, key string) string // nil: store.HashKey; see WithKeyHash

	cleanMu   sync.Mutex
	lastClean atomic.Int64 // unix ns of the last cleanup start, 0 for never; written under cleanMu
	cleaning  bool         // guarded by cleanMu
	closed    bool         // guarded by cleanMu
	cleanWG   sync.WaitGroup
}

// Option configures an Engine.
type Option func(*shared)

// WithClock makes the engine read time from now instead of time.Now. Tests
// use it to expire leases and records without sleeping.
func WithClock(now func() time.Time) Option { return func(s *shared) { s.now = now } }

// WithLogger sets the logger for background work (cleanup, lease renewal).
// The default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *shared) { s.logger = l } }

// New returns an engine over s with policy p (zero fields take their
// defaults). It panics if p is invalid: policies are written by programmers,
// and configuration loaders call Policy.Validate first.
func New(s store.Store, p Policy, opts ...Option) *Engine {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		panic(err)
	}
	sh := &shared{now: time.Now, logger: slog.Default(), completeTimeout: 30 * time.Second}
	for _, o := range opts {
		o(sh)
	}
	return &Engine{store: s, policy: p, shared: sh}
}

// WithPolicy returns an engine over the same store with another policy. The
// engines share their clock, logger and cleanup throttle: the gateway makes
// one per route.
func (e *Engine) WithPolicy(p Policy) *Engine {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return &Engine{store: e.store, policy: p, shared: e.shared}
}

// Policy returns the engine's policy, defaults applied.
func (e *Engine) Policy() Policy { return e.policy }

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.store }

// Now returns the engine's clock reading.
func (e *Engine) Now() time.Time { return e.now() }

// Do runs fn at most once for c's scope and key, and returns its outcome to
// every call with the same key until the record expires:
//
//   - first call: fn runs; Result.Replayed is false.
//   - the key succeeded before: the stored value, Replayed true.
//   - the key is held by a running call: a *ConflictError matching
//     ErrInProgress, or, with Policy.Wait, the outcome once it finishes.
//   - another fingerprint or binding: ErrFingerprintMismatch or ErrKeyReused.
//   - the first call failed: under OnFailureRelease fn runs again; otherwise
//     ErrPreviousFailure, with the failure in Result.Value. A failure that
//     wraps ErrNotExecuted is always released.
//   - invalid key: ErrInvalidKey. Store failure: ErrStoreUnavailable (or fn
//     runs unprotected under OnStoreErrorFailOpen).
//
// When fn succeeded but its outcome could not be stored, Do returns the
// outcome together with an error matching ErrStoreUnavailable or
// ErrLeaseLost.
func (e *Engine) Do(ctx context.Context, c Call, fn Func) (Result, error) {
	key, err := ValidateKey(c.Key, e.policy.MaxKeyBytes)
	if err != nil {
		return Result{}, err
	}
	c.Key = key
	keyHash := e.hashKey(c.Scope, key)
	e.maybeCleanup()

	// Waiting is measured on the monotonic clock, not the injected one: a
	// test's frozen clock must not make a caller wait forever.
	var waitUntil time.Time
	if e.policy.Wait > 0 {
		waitUntil = time.Now().Add(e.policy.Wait)
	}
	backoff := 5 * time.Millisecond
	for {
		now := e.now()
		req := store.ReserveRequest{
			Record: store.Record{
				KeyHash:     keyHash,
				Scope:       c.Scope,
				Key:         key,
				Fingerprint: c.Fingerprint,
				Binding:     c.Binding,
				State:       store.InProgress,
				Token:       newToken(),
				RequestID:   c.RequestID,
				CreatedAt:   now,
				UpdatedAt:   now,
				ExpiresAt:   now.Add(e.policy.TTL),
				LeaseUntil:  now.Add(e.policy.Lease),
			},
			Now:           now,
			TakeOverStale: e.policy.OnStale == OnStaleRetry,
		}
		res, err := e.store.Reserve(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, context.Cause(ctx)
			}
			if e.policy.OnStoreError == OnStoreErrorFailOpen {
				e.logger.Warn("idem: store failed, running without protection",
					"scope", c.Scope, "err", err)
				v, ferr := fn(ctx)
				return Result{Value: v, State: stateOf(ferr), RequestID: c.RequestID, CreatedAt: now, Unprotected: true}, ferr
			}
			return Result{}, &StoreError{Op: "reserve", Err: err}
		}
		ex := res.Existing
		if !res.Acquired && ex.Token == req.Record.Token && ex.State == store.InProgress {
			// Our own reservation, made by an earlier try whose reply was
			// lost and that the store client retried.
			res.Acquired = true
		}
		if res.Acquired {
			return e.run(ctx, req.Record, res.TookOver, fn)
		}
		switch {
		case ex.Binding != c.Binding:
			return Result{}, &ConflictError{Type: ConflictKeyReused, Scope: c.Scope, Key: key, Record: ex}
		case ex.Fingerprint != c.Fingerprint:
			return Result{}, &ConflictError{Type: ConflictPayloadMismatch, Scope: c.Scope, Key: key, Record: ex}
		case ex.State == store.Succeeded:
			return replay(ex), nil
		case ex.State == store.Failed:
			return replay(ex), &ConflictError{Type: ConflictPreviousFailure, Scope: c.Scope, Key: key, Record: ex}
		}
		// In progress. A stale record reaches here only under
		// OnStaleConflict; waiting for it is pointless.
		stale := ex.Stale(now)
		left := time.Until(waitUntil)
		if waitUntil.IsZero() || stale || left <= 0 {
			return Result{}, &ConflictError{Type: ConflictInProgress, Scope: c.Scope, Key: key, Record: ex, Stale: stale}
		}
		// Poll: the stores are shared between processes, so there is no
		// local signal to wait for. Jitter spreads the pollers of one key.
		d := min(backoff+rand.N(backoff/2+1), left)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, context.Cause(ctx)
		case <-t.C:
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

func replay(r store.Record) Result {
	return Result{Value: r.Value, Replayed: true, State: r.State, RequestID: r.RequestID, CreatedAt: r.CreatedAt}
}

func stateOf(err error) State {
	if err != nil {
		return store.Failed
	}
	return store.Succeeded
}

// newToken returns a fencing token. Tokens are random rather than counted
// so that a key whose record expired and was recreated never hands an old
// holder's token to a new one.
func newToken() uint64 {
	for {
		if t := rand.Uint64(); t != 0 {
			return t
		}
	}
}

// run executes fn for the reservation rec and records its outcome.
func (e *Engine) run(ctx context.Context, rec store.Record, tookOver bool, fn Func) (res Result, err error) {
	f := store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token}
	runCtx, cancel := context.WithCancelCause(ctx)
	stopRenew := e.renew(runCtx, f, cancel)
	finished := false
	defer func() {
		stopRenew()
		cancel(nil)
		if !finished {
			// fn panicked: free the key so that a retry can run, instead of
			// leaving it blocked until the lease runs out.
			e.endWrite(ctx, "release", func(c context.Context) error { return e.store.Release(c, f) })
		}
	}()

	v, ferr := fn(runCtx)
	finished = true
	stopRenew()
	res = Result{Value: v, State: stateOf(ferr), RequestID: rec.RequestID, CreatedAt: rec.CreatedAt, TookOver: tookOver}

	now := e.now()
	var werr error
	switch {
	case ferr == nil:
		werr = e.endWrite(ctx, "complete", func(c context.Context) error {
			return e.store.Complete(c, store.Completion{Fence: f, State: store.Succeeded, Value: v, Now: now, ExpiresAt: now.Add(e.policy.TTL)})
		})
	case e.policy.OnFailure == OnFailureRelease || errors.Is(ferr, ErrNotExecuted):
		werr = e.endWrite(ctx, "release", func(c context.Context) error { return e.store.Release(c, f) })
	default:
		fv := failureValue(ferr)
		res.Value = fv
		werr = e.endWrite(ctx, "complete", func(c context.Context) error {
			return e.store.Complete(c, store.Completion{Fence: f, State: store.Failed, Value: fv, Now: now, ExpiresAt: now.Add(e.policy.TTL)})
		})
	}
	if errors.Is(werr, store.ErrLeaseLost) && e.wroteIt(ctx, rec, ferr, res.Value) {
		// A client that retries a write whose reply was lost (go-redis
		// does, and so does endWrite) sees its own earlier success as a
		// lost lease. The record says who really holds it.
		werr = nil
	}
	if werr != nil {
		if ferr != nil {
			return res, errors.Join(ferr, werr)
		}
		return res, werr
	}
	return res, ferr
}

// endWrite performs a write that ends a reservation. It outlives the
// caller's context (a client that hangs up must not leave the key blocked)
// and retries transient store errors for a while: an outcome that is not
// stored would let a later caller run the operation again once the lease
// runs out.
func (e *Engine) endWrite(ctx context.Context, op string, write func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.completeTimeout)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		err := write(wctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrLeaseLost):
			return fmt.Errorf("idem: %s: %w", op, err)
		case errors.Is(err, store.ErrClosed) || wctx.Err() != nil:
			return &StoreError{Op: op, Err: err}
		}
		e.logger.Warn("idem: store write failed, retrying", "op", op, "err", err)
		select {
		case <-wctx.Done():
			return &StoreError{Op: op, Err: err}
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// wroteIt reports whether the record of rec already shows the end this
// call tried to write: completed with its token and value, or released.
func (e *Engine) wroteIt(ctx context.Context, rec store.Record, ferr error, value []byte) bool {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.completeTimeout)
	defer cancel()
	cur, err := e.store.Get(gctx, rec.Scope, rec.KeyHash, e.now())
	released := ferr != nil && (e.policy.OnFailure == OnFailureRelease || errors.Is(ferr, ErrNotExecuted))
	switch {
	case released:
		// Gone, or someone else's: either way this call's hold is over.
		return errors.Is(err, store.ErrNotFound) || (err == nil && cur.Token != rec.Token)
	case err != nil || cur.Token != rec.Token:
		return false
	case ferr == nil:
		return cur.State == store.Succeeded && bytes.Equal(cur.Value, value)
	default:
		return cur.State == store.Failed && bytes.Equal(cur.Value, value)
	}
}

func failureValue(err error) []byte {
	var f *Failure
	if errors.As(err, &f) && f.Value != nil {
		return f.Value
	}
	return []byte(err.Error())
}

// renew extends the lease every third of its length until stop is called.
// If the lease is lost, the operation's context is canceled with cause
// ErrLeaseLost so it can stop early. It uses a timer rather than a goroutine
// with a ticker: most operations end long before the first renewal, and a
// timer that never fires costs almost nothing.
func (e *Engine) renew(ctx context.Context, f store.Fence, cancel context.CancelCauseFunc) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool // guarded by mu
		running sync.WaitGroup
		timer   *time.Timer
	)
	every := e.policy.Lease / 3
	tick := func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		running.Add(1)
		mu.Unlock()
		defer running.Done()
		err := e.store.Renew(ctx, f, e.now().Add(e.policy.Lease))
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			cancel(ErrLeaseLost)
			return
		case err != nil && ctx.Err() == nil:
			e.logger.Warn("idem: lease renewal failed", "scope", f.Scope, "err", err)
		case ctx.Err() != nil:
			return
		}
		mu.Lock()
		if !stopped {
			timer.Reset(every)
		}
		mu.Unlock()
	}
	mu.Lock()
	timer = time.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		stopped = true
		timer.Stop()
		mu.Unlock()
		running.Wait() // a renewal in flight finishes before the outcome is written
	}
}

// Lookup returns the live record of key in scope, or an error matching
// store.ErrNotFound. The key is validated as Do would.
func (e *Engine) Lookup(ctx context.Context, scope, key string) (store.Record, error) {
	key, err := ValidateKey(key, e.policy.MaxKeyBytes)
	if err != nil {
		return store.Record{}, err
	}
	return e.store.Get(ctx, scope, e.hashKey(scope, key), e.now())
}
