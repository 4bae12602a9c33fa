package idemhttp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/httpfield"
	"github.com/idem-dev/idem/store"
)

// This file is the middleware's request path, in call order: serve matches
// the route, newCall turns the request into the engine's call, execute runs
// the handler through the engine, and finish (the handler ran for this
// request) or answer (it did not) send the response. The helpers they share
// are below them; how a response is held, stored and sent again lives in
// capture.go, storedresponse.go and send.go.

// exchange is one keyed request on its way through the middleware: what
// every step of the path needs, so that the steps are methods on it rather
// than functions of many parameters. It lives on serve's stack.
type exchange struct {
	m    *middleware
	w    http.ResponseWriter
	r    *http.Request // the client's request, with the span's context when traced
	rt   *route
	call idem.Call // set by newCall
	body []byte    // set by newCall
	ev   Event     // what the middleware did, reported when serve returns
	sp   spanOf    // traces nothing unless tracing is on and r is keyed
	// tenant is the caller's, set by newCall: what Options.MaxKeysPerTenant
	// counts by.
	tenant string
	// uncounted: admit let the call through without counting it (the
	// tenant is at its cap, and the key has a record).
	uncounted bool
}

// serve is the middleware's handler.
func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	rt := m.match(r)
	if rt == nil {
		if v := m.variant(r); v != nil {
			if ev, refused := m.refuseVariant(w, r, v); refused {
				m.report(r, ev)
				return
			}
		}
		next.ServeHTTP(w, r)
		if len(r.Header[HeaderName]) > 0 && !SafeMethod(r.Method) {
			m.unprotected(r)
		} else {
			m.report(r, Event{Outcome: OutcomePassThrough})
		}
		return
	}
	x := exchange{m: m, w: w, r: r, rt: rt, ev: Event{Route: rt.Pattern}}
	if len(r.Header[HeaderName]) > 0 {
		if tr := m.trace.active(); tr != nil {
			x.r, x.sp = m.trace.start(tr, r, rt)
		}
	}
	defer x.done()
	p := x.newCall()
	x.sp.call(m.trace, x.call)
	switch {
	case p != nil:
		x.reject(p)
		return
	case x.call.Key == "": // no key, and the route lets it pass
		x.ev.Outcome = OutcomePassThrough
		next.ServeHTTP(w, x.r.WithContext(context.WithValue(x.r.Context(), routeKey{}, rt)))
		return
	}
	if x.m.limit != nil && !x.admit() {
		return
	}
	a, pooled := x.execute(next)
	if x.m.limit != nil {
		x.counted(a) // before finish, which panics again when the handler did
	}
	x.sp.res = a.res
	switch {
	case a.detached:
		x.reject(&Problem{Kind: KindUpstreamTimeout, Key: x.call.Key, RetryAfter: time.Second,
			Detail: "no answer yet: the call may still complete. Retry with the same Idempotency-Key to get its outcome"})
	case a.ran:
		x.finish(a) // panics again when the handler panicked: a is then not released
	default:
		x.answer(a.res, a.err)
	}
	if pooled {
		a.release()
	}
}

// newCall turns the request into the engine's call and reads its body, or
// returns the problem that stops it; a request without a key that the
// route lets pass gets neither (an empty call.Key). The body is read here,
// before anything is reserved, under the body deadline. The request the
// handler gets is made only when it runs (see attempt.run): a replay needs
// none of it.
func (x *exchange) newCall() *Problem {
	key, p := x.rt.parseKey(x.r)
	if p != nil || key == "" {
		return p
	}
	tenant, ok := x.m.tenant(x.r)
	if !ok {
		detail := "a keyed request must identify its caller, so that its key is its caller's alone"
		if x.m.former {
			detail = "a keyed request must carry its caller's credentials (Authorization, a cookie, an API key or a TLS client certificate), so that its key is its caller's alone"
		}
		return &Problem{Kind: KindTenantRequired, Key: key, Detail: detail}
	}
	body, p := x.m.readBody(x.w, x.r)
	if p != nil {
		p.Key = key
		return p
	}
	reqID := x.r.Header.Get(x.m.reqIDHeader)
	if reqID == "" {
		reqID = httpfield.NewRequestID()
	}
	x.body, x.tenant = body, tenant
	scope := x.rt.Scope(x.r, tenant)
	x.call = idem.Call{
		Scope:       scope,
		Key:         key,
		Fingerprint: x.rt.Fingerprint(x.r, body),
		Binding:     x.rt.Binding(x.r),
		RequestID:   reqID,
	}
	if x.m.former {
		x.call.FormerScopes = x.formerScopes(scope)
	}
	return nil
}

// admit counts the call against its tenant's cap (Options.MaxKeysPerTenant)
// until counted, or, when the tenant is at its cap and the key has no live
// record, answers 429 too_many_keys: a retry of a key the tenant already
// holds is answered as ever, so that a caller at its cap still learns its
// calls' outcomes. Only a tenant at its cap pays the extra read.
func (x *exchange) admit() bool {
	ok, after := x.m.limit.admit(x.tenant)
	if ok {
		return true
	}
	if _, err := x.rt.eng.Peek(x.r.Context(), x.call); !errors.Is(err, store.ErrNotFound) {
		// A live record (or the store's error, which the engine answers
		// again): no new record is made for this call by admitting it.
		x.uncounted = true
		return true
	}
	x.reject(&Problem{Kind: KindTooManyKeys, Key: x.call.Key, RetryAfter: after,
		Detail: "this caller holds as many live Idempotency-Keys as it may; nothing was executed. " +
			"Retries of keys already used are still answered; a new key is accepted once one of this caller's records expires"})
	return false
}

// counted ends the call's count: a record it created counts against its
// tenant until its TTL ends.
func (x *exchange) counted(a *attempt) {
	if x.uncounted {
		return
	}
	created, size := a.detached, int64(0)
	if a.ran && !a.detached && !a.cap.notExecuted {
		// The body stored plus a generous allowance for the record's key,
		// fingerprint and headers.
		created, size = true, int64(a.cap.body.Len())+recordOverhead
	}
	x.m.limit.done(x.tenant, created, size, x.rt.eng.Policy().TTL)
}

// recordOverhead is what a record holds besides its response body, at
// most, for Options.MaxBytesPerTenant.
const recordOverhead = 1024

// execute runs the handler through the engine. Under Route.AnswerWithin it
// waits at most that long after the handler started; then it detaches the
// handler, which goes on and records its outcome, and the caller answers
// 504 (see attempt.within). The attempt it returns may be released
// (pooled) only when pooled reports true.
func (x *exchange) execute(next http.Handler) (a *attempt, pooled bool) {
	a = getAttempt()
	a.capture.rw, a.capture.max, a.capture.status, a.capture.rt = x.w, x.m.maxResp, http.StatusOK, x.rt
	a.cap = &a.capture
	a.m, a.next, a.r, a.rt, a.body, a.reqID = x.m, next, x.r, x.rt, x.body, x.call.RequestID
	if x.rt.AnswerWithin <= 0 {
		a.res, a.err = x.rt.eng.Do(x.r.Context(), x.call, a.op)
		return a, true
	}
	return a.runWithin(x.r.Context(), x.call)
}

// finish answers a request whose handler ran. Its response is sent only
// once its outcome is recorded.
func (x *exchange) finish(a *attempt) {
	cap := a.cap
	x.ev.Outcome, x.ev.Status = OutcomeExecuted, cap.status
	if a.res.Unprotected {
		x.ev.Outcome = OutcomeUnprotected
	}
	switch {
	case a.panicked != nil && cap.passing:
		// Part of the response is out: only aborting the connection tells
		// the client it is not whole (a chunked body would otherwise end
		// cleanly). The outcome is recorded.
		panic(a.panicked)
	case cap.passing:
		// Already sent (a stream, or a body over the limit).
	case recordFailed(a.err):
		x.unrecorded(a)
	case a.panicked == http.ErrAbortHandler:
		x.reject(&Problem{Kind: KindUpstreamUnavailable, Key: x.call.Key, RequestID: x.call.RequestID,
			Detail: "the answer broke off: the call may have run, so its outcome is unknown. " +
				"Retries with this Idempotency-Key get 409 outcome_unknown"})
	case a.panicked != nil:
		// The outcome is recorded; let http.Server report the panic.
		panic(a.panicked)
	default:
		// The record is retained: the first answer tells until when, as
		// replays do (zero, and no header, when the key was released).
		if t := a.res.ExpiresAt; !t.IsZero() {
			if a.expires == nil {
				a.expires = make([]string, 1)
			}
			a.expires[0] = x.rt.expiresDate(t)
			x.w.Header()[ExpiresHeader] = a.expires
		}
		x.commit(cap)
	}
}

// answer answers a request whose handler did not run for it: a replay, a
// conflict, or the store's failure.
func (x *exchange) answer(res idem.Result, err error) {
	c, log := x.call, x.m.log
	if err == nil {
		x.replay(x.r.Context(), res)
		return
	}
	var ce *idem.ConflictError
	switch {
	case errors.As(err, &ce):
		log.Info("idem: conflict", x.m.logAttrs(slog.LevelInfo, c, "conflict_type", ce.Type)...)
		x.conflict(res, ce)
	case errors.Is(err, store.ErrNoSpace):
		// 503 rather than WebDAV's 507: clients and their retry policies
		// know to come back after a 503 with Retry-After.
		log.Error("idem: store full", x.m.logAttrs(slog.LevelError, c, "err", err)...)
		x.reject(&Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: 5 * time.Second,
			Detail: "the idempotency store has no space left to record new calls; nothing was executed. " +
				"Outcomes already recorded are still replayed; retry later"})
	case errors.Is(err, idem.ErrStoreUnavailable):
		log.Error("idem: store unavailable", x.m.logAttrs(slog.LevelError, c, "err", err)...)
		x.reject(&Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: time.Second,
			Detail: "the idempotency store cannot be reached; nothing was executed"})
	case x.r.Context().Err() != nil:
		// The client went away while waiting: nobody to answer.
		x.ev.Outcome = OutcomePassThrough
	default:
		log.Error("idem: unexpected error", x.m.logAttrs(slog.LevelError, c, "err", err)...)
		x.reject(&Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: time.Second,
			Detail: "the request could not be checked; nothing was executed"})
	}
}

// unrecorded answers a request whose handler ran but whose outcome could
// not be recorded (its lease was lost to a takeover, or the store failed).
// The held response is never sent: the client gets what a retry gets.
func (x *exchange) unrecorded(a *attempt) {
	c := x.call
	x.m.log.Error("idem: outcome not recorded; answering what a retry gets", x.m.logAttrs(slog.LevelError, c,
		"request_id", c.RequestID, "kept", a.res.Kept, "err", a.err)...)
	notRecorded := &Problem{Kind: KindOutcomeNotRecorded, Key: c.Key, RequestID: c.RequestID, RetryAfter: time.Second,
		Detail: "the call may have run, but its outcome could not be recorded; retry with the same Idempotency-Key"}
	if a.res.Kept {
		notRecorded.Detail = "the call ran, but the idempotency store would not take its outcome yet: " +
			"this server keeps it, records it as soon as the store accepts, and answers retries of this key from it. " +
			"Retry with the same Idempotency-Key: the call is not run again while this server runs"
	}
	if !errors.Is(a.err, idem.ErrLeaseLost) {
		// The store failed: the key is still this call's, and a retry
		// gets its outcome once recorded (or kept), never a second run.
		x.reject(notRecorded)
		return
	}
	// Another call has the key now: answer what a retry gets, decided as
	// Do decides it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), 5*time.Second)
	defer cancel()
	res, err := x.rt.eng.Peek(ctx, c)
	var ce *idem.ConflictError
	switch {
	case err == nil:
		x.replay(context.Background(), res)
	case errors.As(err, &ce):
		x.conflict(res, ce)
	default:
		// Released since, or the store does not answer.
		x.reject(notRecorded)
	}
}

// conflict answers an existing record that keeps the call from running,
// saying until when the record is retained.
func (x *exchange) conflict(res idem.Result, ce *idem.ConflictError) {
	p := &Problem{Key: x.call.Key, KeyExpires: ce.Record.ExpiresAt}
	switch ce.Type {
	case idem.ConflictPreviousFailure:
		if x.rt.eng.Policy().OnFailure == idem.OnFailureCache {
			x.replay(context.Background(), res)
			return
		}
		p.Kind, p.Detail = KindPreviousFailure, "the first request with this key failed; use a new key to try again"
		if stored, err := DecodeResponse(ce.Record.Value); err == nil {
			p.Previous = newPreviousFailure(stored)
		}
	case idem.ConflictInProgress:
		p.Kind, p.Detail = KindInProgress, "a request with this key is still being processed; retry later"
		p.RetryAfter = ce.RetryAfter()
	case idem.ConflictPayloadMismatch:
		p.Kind, p.Detail = KindPayloadMismatch, "this key was used with a different request body or target"
	case idem.ConflictKeyReused:
		p.Kind, p.Detail = KindKeyReused, "this key was used for "+ce.Record.Binding
	case idem.ConflictOutcomeUnknown:
		p.Kind, p.RequestID = KindOutcomeUnknown, ce.Record.RequestID
		p.Detail = "the first request with this key (request ID " + ce.Record.RequestID + ") was sent, but no complete answer came back: " +
			"it may have run. This key answers 409 until it expires or an operator releases it"
	default:
		p.Kind, p.Detail = KindStoreUnavailable, "the key is in an unknown state: "+string(ce.Type)
	}
	x.reject(p)
}

// reject answers p in the route's shape.
func (x *exchange) reject(p *Problem) {
	x.rt.WriteProblem(x.w, p)
	x.ev.Outcome, x.ev.Kind, x.ev.Status = OutcomeRejected, p.Kind, p.Status
}

// done reports what the middleware did and ends the request's span.
func (x *exchange) done() {
	x.m.report(x.r, x.ev)
	x.sp.end(&x.ev)
}

func (m *middleware) report(r *http.Request, ev Event) {
	if m.observe != nil {
		m.observe(r, ev)
	}
}

// recordFailed reports whether err says an outcome could not be recorded.
func recordFailed(err error) bool {
	return errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrStoreUnavailable)
}
