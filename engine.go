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

	"github.com/idem-dev/idem/internal/wakeup"
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
	// Binding is the action and target the key is bound to
	// ("cancel_workflow wf-42"). A key reused with another binding is
	// ErrKeyReused. Empty means no binding.
	Binding string
	// RequestID identifies this call; replays report the first call's.
	RequestID string
	// FormerScopes are scopes under which an earlier version of the
	// caller may have recorded this call's key: the scope its rules gave
	// the same caller before they changed. While legacy reads are on
	// (WithLegacyReads), a first call also looks for its record there and
	// replays, or conflicts with, what it finds as if found under Scope.
	// Name only scopes that identified this very caller: a record found
	// there is given to this call. Empty for most callers.
	FormerScopes []string
}

// Result is the outcome of Do.
type Result struct {
	// Value is the operation's result: fresh, or replayed from the store.
	// For a failure recorded by OnFailureCache or OnFailureConflict it is the
	// stored failure.
	Value []byte
	// Replayed is true when the operation did not run for this call.
	Replayed bool
	// State is Succeeded or Failed.
	State State
	// RequestID and CreatedAt are those of the first call.
	RequestID string
	CreatedAt time.Time
	// ExpiresAt, for a replay (and the stored failure of a
	// ConflictPreviousFailure or ConflictOutcomeUnknown), is when the key's
	// record expires: until then every call with the key gets this outcome
	// back; after it, the key is free and a call with it runs again. For
	// the call that ran the operation and recorded its outcome it is
	// TTL after the moment before the record was written, never later than
	// the store's own expiry; zero when the key was released.
	ExpiresAt time.Time
	// Waited is true when the call found the key held by a running call
	// and waited for it to end (Policy.Wait), whatever it got then.
	Waited bool
	// TookOver is true when this call ran the operation after taking the key
	// over from a holder whose lease ran out (OnStaleRetry).
	TookOver bool
	// Unprotected is true when the operation ran without the store's
	// protection because the store failed and the policy is
	// OnStoreErrorFailOpen.
	Unprotected bool
	// NotRecorded is true when the operation ran and returned Value, but
	// its outcome could not be stored: the call lost its lease to another
	// (Do's error matches ErrLeaseLost) or the store kept failing
	// (ErrStoreUnavailable). Retries will not get Value, so it must not be
	// presented as the key's outcome; see Do.
	NotRecorded bool
	// Kept is set with NotRecorded when the store failed (not when the
	// lease was lost to another call): this process keeps the outcome,
	// renews the key's lease, writes the outcome as soon as the store
	// takes it, and meanwhile answers retries of the key from it. The key
	// runs no second time unless this process dies first. It is set too
	// when the store lost the key's record and the outcome's write-back
	// (see WithOnRecordLost) could not be written yet; there the key runs
	// again if another call reserves it before the write-back lands.
	Kept bool
}

// Func is the operation behind a key. Its context is derived from Do's: it
// ends when the caller's does, and with cause ErrLeaseLost if another
// caller takes the key over. Its lease is renewed until it returns, even
// after the caller's context has ended, so an operation that runs on
// regardless is never run a second time by a retry. The context carries the
// reservation's fencing token (TokenFromContext). An operation that started
// its work and cannot tell whether it took effect returns an error wrapping
// ErrOutcomeUnknown; one that failed before doing anything, ErrNotExecuted.
type Func func(ctx context.Context) ([]byte, error)

// Engine runs operations at most once per (scope, key). It is safe for
// concurrent use.
type Engine struct {
	store    store.Store
	policy   Policy
	renewals *renewals // of this policy's lease
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
	storeHash       store.KeyHasher                // the store's own record names, if it has them
	legacyReads     *bool                          // as WithLegacyReads set it; nil: not set
	legacyReadsOn   bool                           // see WithLegacyReads; decided in New
	onFreed         func(scope string)             // nil: nothing; see WithOnFreed
	redact          Redactor                       // how logs print scopes and keys; see WithRedactor
	onLost          func(scope string)             // nil: nothing; see WithOnRecordLost

	cleanMu   sync.Mutex
	lastClean atomic.Int64 // unix ns of the last cleanup start, 0 for never; written under cleanMu
	cleaning  bool         // guarded by cleanMu
	closed    bool         // guarded by cleanMu
	cleanWG   sync.WaitGroup
	// closeCtx ends when Close is called: background work stops.
	closeCtx    context.Context
	signalClose context.CancelFunc
	orphans     orphans // reservations whose answer was lost; see freeOrphan
	keeper      keeper  // outcomes the store would not take yet; see keep

	// waiters holds the callers waiting for a key held by a call in this
	// process (Policy.Wait), woken when it ends.
	waiters wakeup.Hub
	// pollCap bounds the interval between two reads of a waiter, and is
	// the interval of the safety-net poll when the store notifies.
	pollCap time.Duration
	// pollStart is a waiter's first interval when the store does not
	// notify; it doubles up to pollCap.
	pollStart time.Duration
	// notifier is the store's Notifier (store.NotifierOf), nil if none.
	notifier store.Notifier
}

// DefaultPollCap bounds the interval between two reads of the record by a
// caller waiting for a running call (Policy.Wait): the longest a waiter can
// stay parked after the holder ended when no notification reaches it.
const DefaultPollCap = 250 * time.Millisecond

// Option configures an Engine with a setting of the process rather than of
// one kind of call (that is Policy): its clock, logger, key hash and
// background hooks, shared by every engine derived with WithPolicy. Make
// one with the With functions; the zero Option changes nothing.
type Option struct{ apply func(*shared) }

// WithClock makes the engine read the wall time from now instead of
// time.Now: the times it reports and the high bits of its fencing tokens.
// Leases and record expiry are not judged on it: the store judges them on
// its own clock, and the engine counts its holders' leases on the
// monotonic clock (store/doc.go, "One clock for a lease"), so an engine
// whose clock is hours off neither takes a live holder's key over nor
// treats a live record as expired. Tests use it to run a replica with a
// skewed clock.
func WithClock(now func() time.Time) Option { return Option{func(s *shared) { s.now = now }} }

// WithWaitPolling sets how often a caller waiting for a running call
// (Policy.Wait) reads the record when nothing wakes it: first, doubling up
// to max. The defaults are 5 ms and DefaultPollCap (250 ms). Waiters are
// woken without polling by a holder in the same process, and by the
// store's Notifier when it has one; then they read only every max, as a
// safety net, and max is the longest a lost notification can delay them.
// Non-positive values keep the defaults.
func WithWaitPolling(first, max time.Duration) Option {
	return Option{func(s *shared) {
		if first > 0 {
			s.pollStart = first
		}
		if max > 0 {
			s.pollCap = max
		}
	}}
}

// WithLogger sets the logger for background work (cleanup, lease renewal).
// The default is slog.Default().
func WithLogger(l *slog.Logger) Option { return Option{func(s *shared) { s.logger = l }} }

// WithOnFreed calls f, with the key's scope, each time the engine frees a
// reservation whose answer was lost: the store applied it, the connection
// broke before its answer came back, and the engine released it once the
// store answered again, so that the caller's retry runs at once instead of
// waiting out the lease. Operators count these (the gateway's
// idem_reservations_freed_total): a steady rate means the store's
// connections break mid-call. f runs on the engine's background goroutine
// and must not block. The default does nothing; every free is also logged
// at Info.
func WithOnFreed(f func(scope string)) Option { return Option{func(s *shared) { s.onFreed = f }} }

// WithOnRecordLost calls f, with the key's scope, each time a holder's
// write that ends its call finds its record gone from the store: not
// taken over by another caller, gone, as when a failover of the store
// promoted a replica that never received the reservation, or an operator
// released the key of a holder judged stale (Engine.Release) that then
// finished; the store cannot tell the two apart. The holder writes its
// outcome back as a new record if the key is still absent (it reserves
// the key anew, then completes), so that a key that ran to its end does
// not run again; if another call reserved the key first, that call runs
// it again and the outcome is dropped. The call is answered as recorded
// only if the write-back landed before Do returns: the outcome is then
// the key's record, and retries replay it. Otherwise it is answered as
// NotRecorded: ErrLeaseLost when another call has the key, or
// ErrStoreUnavailable with Result.Kept while the write-back waits for the
// store (retries in this process are answered from the kept outcome).
// Operators count these (the gateway's idem_store_records_lost_total),
// written back or not: any means the store lost acknowledged writes, and
// the store's replicas should confirm them (docs/stores: sync_replicas).
// f must not block. The default does nothing; every loss is also logged
// at Warn, and a write-back given up for another call's reservation too.
func WithOnRecordLost(f func(scope string)) Option {
	return Option{func(s *shared) { s.onLost = f }}
}

// New returns an engine over s with policy p (zero fields take their
// defaults). It panics if p is invalid: policies are written by programmers,
// and configuration loaders call Policy.Validate first.
func New(s store.Store, p Policy, opts ...Option) *Engine {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		panic(err)
	}
	sh := &shared{now: time.Now, logger: slog.Default(), completeTimeout: 30 * time.Second, pollCap: DefaultPollCap, pollStart: 5 * time.Millisecond}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(sh)
		}
	}
	sh.notifier, _ = store.NotifierOf(s)
	sh.storeHash, _ = store.KeyHasherOf(s)
	sh.decideLegacyReads(s)
	sh.closeCtx, sh.signalClose = context.WithCancel(context.Background())
	return &Engine{store: s, policy: p, renewals: newRenewals(p.Lease / 3), shared: sh}
}

// WithPolicy returns an engine over the same store with another policy. The
// engines share their clock, logger and cleanup throttle: the gateway makes
// one per route.
func (e *Engine) WithPolicy(p Policy) *Engine {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		panic(err)
	}
	r := e.renewals
	if p.Lease != e.policy.Lease {
		r = newRenewals(p.Lease / 3)
	}
	return &Engine{store: e.store, policy: p, renewals: r, shared: e.shared}
}

// Policy returns the engine's policy, defaults applied.
func (e *Engine) Policy() Policy { return e.policy }

// Uses reports whether the engine runs over s: its store is s, or wraps s
// (through an Unwrap() store.Store method). An adapter that keeps its own
// store and needs its methods (pgtx, its transactions) checks that the
// engine it is handed runs over it; the engine never hands its store out,
// so that records are written only through its fences.
func (e *Engine) Uses(s store.Store) bool {
	for cur := e.store; cur != nil; {
		if cur == s {
			return true
		}
		u, ok := cur.(interface{ Unwrap() store.Store })
		if !ok {
			return false
		}
		cur = u.Unwrap()
	}
	return false
}

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
//   - the first call's outcome is unknown (fn returned an error wrapping
//     ErrOutcomeUnknown, or panicked): under OnUnknownConflict a
//     *ConflictError matching ErrOutcomeUnknown, with the first call's
//     record, until the record expires or Engine.Release; under
//     OnUnknownRelease fn runs again.
//   - invalid key: ErrInvalidKey. Store failure: ErrStoreUnavailable (or fn
//     runs unprotected under OnStoreErrorFailOpen).
//
// When fn ran but its outcome could not be stored, Do returns fn's value
// with Result.NotRecorded set and an error matching ErrLeaseLost (another
// call took the key over while this one was paused past its lease, and the
// record holds that call's outcome; or the store lost the key's record and
// another call reserved it before this one wrote its outcome back: see
// WithOnRecordLost) or ErrStoreUnavailable (the store kept failing). That value is not the key's outcome: retries will not get it,
// so it must not be shown to a client as the answer to its key. Read what
// retries get with Lookup instead (the HTTP middleware does).
//
// A panic in fn is recorded as an unknown outcome (see OnUnknown), then
// continues up the caller's stack.
func (e *Engine) Do(ctx context.Context, c Call, fn Func) (Result, error) {
	key, err := ValidateKey(c.Key, e.policy.MaxKeyBytes)
	if err != nil {
		return Result{}, err
	}
	c.Key = key
	keyHash := e.hashKey(c.Scope, key)
	e.maybeCleanup()

	w := e.newWait(keyHash)
	defer w.stop()
	for {
		req := e.reservation(c, keyHash)
		// The holder's lease counts from here, before the request leaves
		// (see hold).
		sent := time.Now()
		res, err := e.reserve(ctx, &w, req)
		if err != nil {
			return e.storeFailed(ctx, c, req, err, fn)
		}
		ex := res.Existing
		if !res.Acquired && ex.Token == req.Record.Token && ex.State == store.InProgress {
			// Our own reservation, made by an earlier try whose reply was
			// lost and that the store client retried.
			res.Acquired = true
		}
		if res.Acquired {
			w.stop()
			if ids := e.formerIdentities(c, key, keyHash); len(ids) > 0 {
				if res, err, ended := e.former(ctx, c, req, sent, ids, fn); ended {
					return res, err
				}
			}
			return e.run(ctx, req.Record, sent, res.TookOver, fn)
		}
		if res, err, ended := e.decide(c, ex); ended {
			res.Waited = w.waited
			return res, err
		}
		// In progress: answer it, or wait for the holder to end and read
		// the record again.
		if res, err, again := w.wait(ctx, c, ex); !again {
			return res, err
		}
	}
}

// reservation is the reservation call c asks the store for, as of now.
func (e *Engine) reservation(c Call, keyHash string) store.ReserveRequest {
	now := e.now()
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash:     keyHash,
			Scope:       c.Scope,
			Key:         c.Key,
			Fingerprint: c.Fingerprint,
			Binding:     c.Binding,
			State:       store.InProgress,
			Token:       newToken(now),
			RequestID:   c.RequestID,
			// The store sets the times it keeps from its own clock;
			// these are what this process reports of its own call.
			CreatedAt:  now,
			UpdatedAt:  now,
			ReadAt:     now,
			ExpiresAt:  now.Add(e.policy.TTL),
			LeaseUntil: now.Add(e.policy.Lease),
			LeaseLeft:  e.policy.Lease,
		},
		Lease:         e.policy.Lease,
		TTL:           e.policy.TTL,
		TakeOverStale: e.policy.OnStale == OnStaleRetry,
	}
}

// former looks for call c's record where an earlier version of idem kept
// it (ids), c having reserved the key under its own identity (req, sent
// at sent). It reports ended false when there is none: c runs. A record
// found there answers c as it would have before the upgrade: c gives its
// reservation back and the record is replayed or conflicts (decide), or
// answers in progress at once (no wait: the holder is a process of the
// earlier version, which announces nothing to this one). A record whose
// holder died before finishing is taken over as a stale record would be:
// c runs under its own reservation. Only c's own record counts: under a
// legacy identity another caller's pair may have joined to the same
// string, and its record is skipped.
func (e *Engine) former(ctx context.Context, c Call, req store.ReserveRequest, sent time.Time, ids []identity, fn Func) (Result, error, bool) {
	for _, id := range ids {
		ex, err := e.store.Get(ctx, id.scope, id.keyHash)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			// Whether the key ran before cannot be told: c must not run
			// (unless the policy runs it unprotected).
			res, err := e.storeFailed(ctx, c, req, err, fn)
			return res, err, true
		}
		as := c
		as.Scope = id.scope
		if !owns(as, ex) {
			continue
		}
		if ex.Stale() && e.policy.OnStale == OnStaleRetry && ex.Fingerprint == c.Fingerprint && ex.Binding == c.Binding {
			res, err := e.run(ctx, req.Record, sent, true, fn)
			return res, err, true
		}
		e.giveBack(ctx, req.Record)
		res, err, ended := e.decide(as, ex)
		if !ended {
			return Result{}, e.inProgress(as, ex), true
		}
		return res, err, true
	}
	return Result{}, nil, false
}

// giveBack releases rec, a reservation this call made and will not run
// under, and wakes whoever waits for its key; if the store fails, the
// reservation is freed in the background as one whose answer was lost.
func (e *Engine) giveBack(ctx context.Context, rec store.Record) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanTry)
	defer cancel()
	err := e.store.Release(gctx, store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token})
	if err != nil && !errors.Is(err, store.ErrLeaseLost) {
		e.freeOrphan(rec)
		return
	}
	e.announce(ctx, rec.Scope, rec.KeyHash, nil)
}

// reserve asks the store for req, unless the key's record is known
// already: handed over by a holder in this process that w waited for,
// kept by this process because the store would not take it yet, or read
// by a woken waiter that found it completed (see ended).
func (e *Engine) reserve(ctx context.Context, w *waiting, req store.ReserveRequest) (res store.Reservation, err error) {
	c := req.Record
	if w.handed != nil {
		res.Existing, w.handed = *w.handed, nil
	} else if cur, ok := e.keptRecord(c.KeyHash); ok {
		// This process holds the key's outcome, which the store has
		// not taken yet: it is what the store will say.
		res.Existing = cur
	} else if cur, ok := e.ended(ctx, w.woken, c.Scope, c.KeyHash); ok {
		res.Existing = cur
	} else {
		res, err = e.store.Reserve(ctx, req)
	}
	w.woken = false
	return res, err
}

// storeFailed answers a reservation the store failed: ErrStoreUnavailable,
// or, under OnStoreErrorFailOpen, fn's outcome run without protection.
func (e *Engine) storeFailed(ctx context.Context, c Call, req store.ReserveRequest, err error, fn Func) (Result, error) {
	// The store may have applied the reservation and lost only its
	// answer: give the key back once it answers again.
	e.freeOrphan(req.Record)
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	if e.policy.OnStoreError == OnStoreErrorFailOpen {
		e.logger.Warn("idem: store failed, running without protection",
			e.logAttrs(slog.LevelWarn, c.Scope, c.Key, "err", err)...)
		v, ferr := fn(ctx)
		return Result{Value: v, State: stateOf(ferr), RequestID: c.RequestID, CreatedAt: req.Record.CreatedAt, Unprotected: true}, ferr
	}
	return Result{}, &StoreError{Op: "reserve", Err: err}
}

func replay(r store.Record, waited bool) Result {
	return Result{Value: r.Value, Replayed: true, State: r.State, RequestID: r.RequestID, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, Waited: waited}
}

func stateOf(err error) State {
	if err != nil {
		return store.Failed
	}
	return store.Succeeded
}

// newToken returns a fencing token: the reservation's time in milliseconds
// in the high 44 bits, 20 random bits below. A holder that takes a key over
// reserves at least a lease after the one it replaces, so on clocks that
// agree within the lease its token is the larger, and an upstream can
// refuse a write whose token is lower than the last it accepted for the key
// (a paused holder waking up), not just a different one. The random bits
// keep two reservations in one millisecond apart, and a key recreated after
// expiry never gets an old holder's token back.
func newToken(now time.Time) uint64 {
	ms := uint64(max(now.UnixMilli(), 0)) & (1<<44 - 1)
	for {
		if t := ms<<20 | rand.Uint64N(1<<20); t != 0 {
			return t
		}
	}
}

// TokenFromContext returns, inside a Func, the fencing token of the
// reservation it runs under: the token that holds the key's record. The
// gateway forwards it upstream (the Idempotency-Token header) so that an
// upstream can reject a holder that lost its lease to another. It reports
// false outside a Func run by Do.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	if c, ok := ctx.(*runContext); ok {
		// The Func's own context: no boxing of the token through Value.
		return c.token, c.token != 0
	}
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok && t != 0
}

// panicFailure is the failure recorded for an operation that panicked.
const panicFailure = "idem: the operation panicked"

// run executes fn for the reservation rec, sent at sent, and records its
// outcome.
func (e *Engine) run(ctx context.Context, rec store.Record, sent time.Time, tookOver bool, fn Func) (Result, error) {
	f := store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token}
	h := e.newHold(ctx, f, sent)
	h.held = newHeld(rec, tookOver) // for HoldFrom: identity.go
	finished := false
	defer func() {
		h.stop()
		h.end(nil)
		if !finished {
			// fn panicked (or called runtime.Goexit) after it started: it
			// may have done its work, so the outcome is unknown. Record
			// that without recovering, so that the panic goes on up the
			// caller's stack unchanged once the record is written.
			err := fmt.Errorf("%s: %w", panicFailure, ErrOutcomeUnknown)
			if _, werr := e.finish(ctx, rec, f, nil, err); werr != nil {
				e.logger.Error("idem: the outcome of a panicked operation was not recorded",
					e.logAttrs(slog.LevelError, rec.Scope, "", "err", werr)...)
			}
		}
	}()

	v, ferr := fn(h.ctx())
	finished = true
	h.stop()
	res, werr := e.finish(ctx, rec, f, v, ferr)
	res.TookOver = tookOver
	if werr != nil {
		res.NotRecorded = true
		if ferr != nil {
			return res, errors.Join(ferr, werr)
		}
		return res, werr
	}
	return res, ferr
}

// finish writes the end of the reservation rec for fn's outcome (v, ferr)
// and wakes the callers waiting for it. werr is the write's error.
func (e *Engine) finish(ctx context.Context, rec store.Record, f store.Fence, v []byte, ferr error) (res Result, werr error) {
	res = Result{Value: v, State: stateOf(ferr), RequestID: rec.RequestID, CreatedAt: rec.CreatedAt}
	now := e.now()
	release := false
	switch {
	case ferr == nil:
	case errors.Is(ferr, ErrOutcomeUnknown):
		// Before ErrNotExecuted: an error claiming both is taken at its
		// worse, since releasing a key whose work took effect runs it
		// twice.
		release = e.policy.OnUnknown == OnUnknownRelease
		res.Value = failureValue(ferr)
	case e.policy.OnFailure == OnFailureRelease || errors.Is(ferr, ErrNotExecuted):
		release = true
	default:
		res.Value = failureValue(ferr)
	}
	stored := res.Value
	if ferr != nil && !release && errors.Is(ferr, ErrOutcomeUnknown) {
		stored = markUnknown(res.Value)
	}
	if release {
		werr = e.endWrite(ctx, "release", func(c context.Context) error { return e.store.Release(c, f) })
	} else {
		werr = e.endWrite(ctx, "complete", func(c context.Context) error {
			return e.store.Complete(c, store.Completion{Fence: f, State: res.State, Value: stored, TTL: e.policy.TTL})
		})
	}
	final := rec
	final.State, final.Value, final.UpdatedAt, final.ExpiresAt = res.State, stored, now, now.Add(e.policy.TTL)
	if errors.Is(werr, store.ErrLeaseLost) {
		// A client that retries a write whose reply was lost (go-redis
		// does, and so does endWrite) sees its own earlier success as a
		// lost lease. The record says who really holds it.
		if wrote, lost := e.wroteIt(ctx, rec, release, res.State, stored); wrote {
			werr = nil
		} else if lost && !errors.Is(werr, ErrNotExecuted) {
			// An end that says nothing ran (pgtx: the transaction that
			// held the completion rolled back and its key was released)
			// left no outcome to write back: the record is gone by
			// design, not lost.
			e.recordLost(rec.Scope)
			rec.Token, werr, res.Kept = e.writeBackNow(final, werr)
		}
	} else if werr != nil && !errors.Is(werr, store.ErrClosed) {
		res.Kept = e.keep(final, release)
	}
	if werr == nil {
		var final *store.Record
		if !release {
			final = &rec
			final.State, final.Value, final.UpdatedAt, final.ReadAt, final.ExpiresAt = res.State, stored, now, now, now.Add(e.policy.TTL)
			final.LeaseLeft = 0
		}
		// Only a success is handed to the waiters: a failure may be
		// ended otherwise than as written (pgtx releases an unknown
		// outcome whose transaction rolled back: nothing ran), so they
		// read it from the store.
		handed := final
		if res.State != store.Succeeded {
			handed = nil
		}
		e.announce(ctx, rec.Scope, rec.KeyHash, handed)
		if final != nil {
			res.ExpiresAt = final.ExpiresAt
		}
	}
	return res, werr
}

// announce wakes the callers waiting for keyHash: those in this process at
// once, handing them final, the record as stored (nil when the key was
// released), so that they need not read it; those in other processes
// through the store's Notifier, which hands final over too when it is a
// store.RecordNotifier. The remote
// notification costs a round trip, so it is sent only by policies that
// wait (Policy.Wait): replicas share their routes' policies, so a key
// nobody waits for is never announced.
func (e *Engine) announce(ctx context.Context, scope, keyHash string, final *store.Record) {
	if final == nil {
		e.waiters.Wake(keyHash)
	} else {
		e.waiters.WakeWith(keyHash, func() any {
			// The caller of Do owns the value it returned and may reuse
			// its buffer: the waiters get a copy.
			r := *final
			r.Value = bytes.Clone(final.Value)
			return &r
		})
	}
	if e.policy.Wait <= 0 {
		return
	}
	n := e.notifier
	if n == nil {
		return
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	defer cancel()
	if err := notify(nctx, n, scope, keyHash, final); err != nil {
		// Waiters elsewhere fall back on polling.
		e.logger.Debug("idem: notify failed", e.logAttrs(slog.LevelDebug, scope, "", "err", err)...)
	}
}

// notify sends final along when n can carry it (store.RecordNotifier), so
// that waiters elsewhere need not read it.
func notify(ctx context.Context, n store.Notifier, scope, keyHash string, final *store.Record) error {
	if rn, ok := n.(store.RecordNotifier); ok && final != nil {
		return rn.NotifyRecord(ctx, *final)
	}
	return n.Notify(ctx, scope, keyHash)
}

// notifyTimeout bounds a notification: it is a hint, and the call it ends
// has already been recorded.
const notifyTimeout = time.Second

// endWrite performs a write that ends a reservation. It outlives the
// caller's context (a client that hangs up must not leave the key blocked)
// and retries transient store errors for a while: an outcome that is not
// stored would let a later caller run the operation again once the lease
// runs out.
func (e *Engine) endWrite(ctx context.Context, op string, write func(context.Context) error) error {
	wctx := newWriteContext(ctx, e.completeTimeout)
	defer wctx.stop()
	backoff := storeRetryFirst
	for {
		err := write(wctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrLeaseLost):
			return fmt.Errorf("idem: %s: %w", op, err)
		case errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrNoSpace) || wctx.Err() != nil:
			// A full disk does not empty in a few retries: the keeper
			// takes the outcome over at once (see keep).
			return &StoreError{Op: op, Err: err}
		}
		e.logger.Warn("idem: store write failed, retrying", "op", op, "err", err)
		select {
		case <-wctx.Done():
			return &StoreError{Op: op, Err: err}
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, storeRetryCap)
	}
}

// A write the store failed is tried again after storeRetryFirst, then
// after twice as long each time, up to storeRetryCap: soon after a blip,
// and no more than once a second against a store that stays down.
const (
	storeRetryFirst = 10 * time.Millisecond
	storeRetryCap   = time.Second
)

// wroteIt reports whether the record of rec already shows the end this
// call tried to write: completed with its token, state and value, or
// released. lost reports a completion that found no record at all: no
// other caller took the key over, the store lost the reservation (a
// failover to a replica that never had it), since a record lives far
// longer than a lease.
func (e *Engine) wroteIt(ctx context.Context, rec store.Record, released bool, state State, value []byte) (wrote, lost bool) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.completeTimeout)
	defer cancel()
	// Read until the store answers, as endWrite writes: a store that
	// failed the write's reply often fails the next call too (a failover),
	// and a read that failed says nothing of what was written.
	cur, err := e.store.Get(gctx, rec.Scope, rec.KeyHash)
	for backoff := storeRetryFirst; err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed); backoff = min(backoff*2, storeRetryCap) {
		select {
		case <-gctx.Done():
			return false, false
		case <-time.After(backoff):
		}
		cur, err = e.store.Get(gctx, rec.Scope, rec.KeyHash)
	}
	switch {
	case released:
		// Gone: the release landed (or the record expired). Someone
		// else's record is a lost lease: the caller must learn that
		// another holder has the key now.
		return errors.Is(err, store.ErrNotFound), false
	case errors.Is(err, store.ErrNotFound):
		return false, true
	case err != nil || cur.Token != rec.Token:
		return false, false
	default:
		return cur.State == state && bytes.Equal(cur.Value, value), false
	}
}

// writeBackNow tries once to write back the outcome final, whose record
// the store lost (see writeBack), and hands it to the keeper if the store
// fails. It returns the token that holds the key when it was written
// (werr nil: the outcome is recorded, and answered so); lost, the end's
// error, when another call holds the key; or a store error with kept set
// when the write-back is pending.
func (e *Engine) writeBackNow(final store.Record, lost error) (token uint64, werr error, kept bool) {
	k := e.writeBack(final)
	done, wrote, err := e.writeOne(k)
	switch {
	case wrote:
		return k.rec.Token, nil, false
	case done:
		return final.Token, lost, false
	}
	if err == nil {
		err = lost
	}
	return final.Token, &StoreError{Op: "complete", Err: err}, e.keepThis(k)
}

// recordLost reports a holder's record that the store lost (wroteIt).
func (e *Engine) recordLost(scope string) {
	e.logger.Warn("idem: the store lost this call's record (a failover to a replica that never had it?); its outcome is written back unless another call reserved the key first", e.logAttrs(slog.LevelWarn, scope, "")...)
	if e.onLost != nil {
		e.onLost(scope)
	}
}

func failureValue(err error) []byte {
	var f *Failure
	if errors.As(err, &f) && f.Value != nil {
		return f.Value
	}
	return []byte(err.Error())
}

// Lookup returns the live record of key in scope, or an error matching
// store.ErrNotFound. The key is validated as Do would.
func (e *Engine) Lookup(ctx context.Context, scope, key string) (Record, error) {
	key, err := ValidateKey(key, e.policy.MaxKeyBytes)
	if err != nil {
		return Record{}, err
	}
	r, id, err := e.find(ctx, Call{Scope: scope, Key: key})
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("idem: %w", err)
	} else if err != nil {
		return Record{}, err
	}
	if !owns(Call{Scope: id.scope, Key: key}, r) {
		return Record{}, &StoreError{Op: "get", Err: store.ErrForeignRecord} // without the key: logged
	}
	return RecordOf(r), nil
}
