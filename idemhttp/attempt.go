package idemhttp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp/internal/workers"
)

// attempt is one call of the engine for a keyed request. Attempts are
// pooled (see getAttempt and release): the capture, its header map and body
// buffer and the engine's operation are made once and reused.
type attempt struct {
	cap      *capture
	capture  capture   // cap's storage: one allocation for both
	op       idem.Func // a.run, bound once per pooled attempt
	ran      bool      // the handler ran for this request
	detached bool      // the client was answered 504 while the handler went on
	token    uint64    // the reservation's fencing token, when the handler ran
	panicked any       // what the handler panicked with
	res      idem.Result
	err      error

	// What run needs, set by exchange.execute.
	m     *middleware
	next  http.Handler
	r     *http.Request
	rt    *route
	body  []byte
	reqID string
	// expires is the Idempotency-Key-Expires value of the first response,
	// made by run (runParts).
	expires []string

	// Under Route.AnswerWithin, the engine runs on a worker (a.background)
	// and the caller waits on ev alone: the handler arms the timer as it
	// starts, which sends evTimeout when the answer deadline passes, and
	// the worker sends evDone when the engine returned (evDoneLate when
	// the timer's evTimeout is sent too). ev, the timer and bg are kept
	// with the pooled attempt, which is pooled only when ev is drained.
	within bool
	armed  bool // the handler armed the timer; the worker's only
	ev     chan uint8
	timer  *time.Timer
	bg     func() // a.background, bound once per pooled attempt
	ctx    context.Context
	call   idem.Call
}

const (
	evDone uint8 = iota
	evDoneLate
	evTimeout
)

var attempts = sync.Pool{New: func() any {
	a := &attempt{}
	a.op, a.bg = a.run, a.background
	return a
}}

// maxPooledBody bounds the capture buffer a pooled attempt keeps, so that
// one large response does not stay in memory for good.
const maxPooledBody = 64 << 10

func getAttempt() *attempt { return attempts.Get().(*attempt) }

// release returns a to the pool once the response is sent. Nothing of it
// may be reachable then: the stored value and the client's copy were made
// from the capture, never aliased to it; net/http forbids the handler to
// use its writer after it returned. An attempt whose handler may still run
// (detached under Route.AnswerWithin) or panicked is never released.
func (a *attempt) release() {
	h, buf := a.capture.h, a.capture.body
	if h != nil {
		clear(h)
	}
	buf.Reset()
	if buf.Cap() > maxPooledBody {
		buf = bytes.Buffer{}
	}
	*a = attempt{op: a.op, bg: a.bg, ev: a.ev, timer: a.timer, capture: capture{h: h, body: buf}}
	attempts.Put(a)
}

// runWithin runs the engine on a worker for a route with an answer
// deadline (Route.AnswerWithin), and waits for it to return or for the
// deadline to pass after the handler started. Then it detaches the
// handler, which goes on and records its outcome, and returns a stand-in
// attempt marked detached, not to be pooled: a itself is the worker's until
// it is done.
func (a *attempt) runWithin(ctx context.Context, c idem.Call) (*attempt, bool) {
	// The handler may outlive this request: its context must not end when
	// the client is answered. (The gateway detached it already.)
	a.ctx, a.call, a.within = ctx, c, true
	if a.ctx.Done() != nil {
		a.ctx = context.WithoutCancel(a.ctx)
	}
	if a.ev == nil {
		a.ev = make(chan uint8, 2) // neither the worker nor the timer blocks on it
	}
	// One wake-up for the caller: a handler start event and a select on
	// the timer made two, and the select alone showed in the gateway's
	// profile (docs/bench/MIDDLEWARE.md).
	callWorkers.Go(a.bg)
	switch <-a.ev {
	case evDone:
		return a, true
	case evDoneLate:
		<-a.ev // the timer's evTimeout: ev must be empty when a is pooled
		return a, true
	}
	if !a.cap.detach() {
		<-a.ev // the response is already streaming to the client
		return a, true
	}
	return &attempt{detached: true}, false
}

// background runs the engine for execute on a worker. It must not touch a
// once evDone is sent: execute may pool a then.
func (a *attempt) background() {
	a.res, a.err = a.rt.eng.Do(a.ctx, a.call, a.op)
	ev := evDone
	if a.armed && !a.timer.Stop() {
		ev = evDoneLate // the timer fired: its evTimeout is in ev or on its way
	}
	if a.cap.isDetached() {
		a.m.logDetached(a.rt, a.call, a)
	}
	a.ev <- ev
}

// timedOut is the answer deadline's timer function.
func (a *attempt) timedOut() { a.ev <- evTimeout }

// callWorkers run the calls of routes with an answer deadline, on
// goroutines that keep their grown stacks between calls (idemhttp/internal/workers).
// A worker idle for 100 ms exits, so none outlives a burst of calls by
// much.
var callWorkers = workers.New(100 * time.Millisecond)

// run is the engine's operation: the handler, writing into the capture.
func (a *attempt) run(ctx context.Context) (v []byte, err error) {
	a.ran = true
	if a.within {
		if a.timer == nil {
			a.timer = time.AfterFunc(a.rt.AnswerWithin, a.timedOut)
		} else {
			a.timer.Reset(a.rt.AnswerWithin)
		}
		a.armed = true
	}
	tok, hasToken := idem.TokenFromContext(ctx)
	a.token = tok
	p := new(runParts)
	r := a.m.handlerRequest(ctx, a.r, p, a.body, a.reqID, tok, hasToken)
	// The replayed mark now, the expiry once the outcome is recorded
	// (finish).
	a.expires = p.marks[1:2:2]
	if h := a.rt.profile.ReplayedHeader; h != "" {
		p.marks[0] = "false"
		a.cap.Header()[textproto.CanonicalMIMEHeaderKey(h)] = p.marks[0:1:1]
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
	a.next.ServeHTTP(a.cap, r)
	return a.outcome(a.m, a.rt)
}

// outcome classifies how the handler ended: not executed (released),
// outcome unknown (never released), or answered (the route's statuses).
func (a *attempt) outcome(m *middleware, rt *route) ([]byte, error) {
	c := a.cap
	enc := c.encode(m.replayHeader)
	switch {
	case c.unknown:
		return nil, &idem.Failure{Value: enc, Err: fmt.Errorf("idemhttp: handler answered %d without a complete answer from its upstream: %w", c.status, idem.ErrOutcomeUnknown)}
	case c.notExecuted:
		return nil, &idem.Failure{Value: enc, Err: fmt.Errorf("idemhttp: handler answered %d: %w", c.status, idem.ErrNotExecuted)}
	case c.hijacked || rt.outcome.Contains(c.status):
		return enc, nil
	}
	return nil, &idem.Failure{Value: enc, Err: statusError(c.status)}
}

func (m *middleware) logDetached(rt *route, c idem.Call, a *attempt) {
	// Info and Error lines alike: never the raw scope or key.
	attrs := m.logAttrs(slog.LevelInfo, c, "route", rt.Pattern, "request_id", c.RequestID)
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
