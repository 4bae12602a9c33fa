package idemhttp

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idem-dev/idem"
)

// attempt is one call of the engine for a keyed request.
type attempt struct {
	cap      *capture
	capture  capture       // cap's storage: one allocation for both
	started  chan struct{} // closed when the handler starts, under Route.AnswerWithin
	ran      bool          // the handler ran for this request
	detached bool          // the client was answered 504 while the handler went on
	token    uint64        // the reservation's fencing token, when the handler ran
	panicked any           // what the handler panicked with
	res      idem.Result
	err      error
}

// execute runs the handler through the engine. Under Route.AnswerWithin it
// waits at most that long after the handler started; then it detaches the
// handler, which goes on and records its outcome, and the caller answers
// 504.
func (m *middleware) execute(next http.Handler, w http.ResponseWriter, r *http.Request, rt *route, c idem.Call) *attempt {
	a := &attempt{}
	a.capture = capture{rw: w, max: m.maxResp, status: http.StatusOK, rt: rt}
	a.cap = &a.capture
	if rt.AnswerWithin <= 0 {
		a.res, a.err = rt.eng.Do(r.Context(), c, a.fn(m, next, r, rt, c.RequestID))
		return a
	}
	a.started = make(chan struct{})
	// The handler may outlive this request: its context must not end when
	// the client is answered.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.res, a.err = rt.eng.Do(r.Context(), c, a.fn(m, next, r, rt, c.RequestID))
		if a.cap.isDetached() {
			m.logDetached(rt, c, a)
		}
	}()
	select {
	case <-done:
		return a
	case <-a.started:
	}
	t := time.NewTimer(rt.AnswerWithin)
	defer t.Stop()
	select {
	case <-done:
		return a
	case <-t.C:
	}
	if !a.cap.detach() {
		<-done // the response is already streaming to the client
		return a
	}
	return &attempt{detached: true}
}

// fn is the engine's operation: the handler, writing into the capture.
func (a *attempt) fn(m *middleware, next http.Handler, r *http.Request, rt *route, reqID string) idem.Func {
	return func(ctx context.Context) (v []byte, err error) {
		a.ran = true
		if a.started != nil {
			close(a.started)
		}
		r.Header = r.Header.Clone()
		r.Header.Set(m.reqIDHeader, reqID)
		r.Header.Del(TokenHeader)
		if tok, ok := idem.TokenFromContext(ctx); ok {
			a.token = tok
			r.Header.Set(TokenHeader, strconv.FormatUint(tok, 10))
		}
		if h := rt.profile.ReplayedHeader; h != "" {
			a.cap.Header().Set(h, "false")
		}
		defer func() {
			if p := recover(); p != nil {
				// A panic after the handler started (ReverseProxy's
				// http.ErrAbortHandler on a body cut mid-way): whether the
				// operation took effect is unknown.
				a.panicked = p
				v, err = nil, &idem.Failure{Err: fmt.Errorf("idemhttp: handler panicked (%v): %w", p, idem.ErrOutcomeUnknown)}
			}
		}()
		next.ServeHTTP(a.cap, r.WithContext(ctx))
		return a.outcome(m, rt)
	}
}

// outcome classifies how the handler ended: not executed (released),
// outcome unknown (never released), or answered (the route's statuses).
func (a *attempt) outcome(m *middleware, rt *route) ([]byte, error) {
	c := a.cap
	resp := c.response(m.keepHeader)
	enc := resp.encode()
	switch {
	case c.unknown:
		return nil, &idem.Failure{Value: enc, Err: fmt.Errorf("idemhttp: handler answered %d without a complete answer from its upstream: %w", resp.Status, idem.ErrOutcomeUnknown)}
	case c.notExecuted:
		return nil, &idem.Failure{Value: enc, Err: fmt.Errorf("idemhttp: handler answered %d: %w", resp.Status, idem.ErrNotExecuted)}
	case c.hijacked || rt.outcome.Contains(resp.Status):
		return enc, nil
	}
	return nil, &idem.Failure{Value: enc, Err: statusError(resp.Status)}
}

func (m *middleware) logDetached(rt *route, c idem.Call, a *attempt) {
	attrs := []any{"route", rt.Pattern, "key", c.Key, "scope", c.Scope, "request_id", c.RequestID}
	if a.panicked != nil {
		m.log.Error("idem: detached handler panicked; outcome unknown", append(attrs, "panic", fmt.Sprint(a.panicked))...)
	}
	if recordFailed(a.err) {
		m.log.Error("idem: outcome of a detached handler not recorded", append(attrs, "err", a.err)...)
		return
	}
	m.log.Info("idem: detached handler finished", append(attrs, "status", a.cap.status)...)
}

type statusError int

func (e statusError) Error() string { return "idemhttp: handler answered " + strconv.Itoa(int(e)) }
