package idem

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idem-dev/idem/internal/periodic"
	"github.com/idem-dev/idem/store"
)

// renewals schedules the lease renewals of the holds of one lease length,
// with one timer for all of them instead of one per hold
// (internal/periodic): every hold renews a fixed period after it started
// or last renewed. Most operations end long before their first renewal;
// for them a hold costs a link and an unlink under a mutex instead of a
// timer's two allocations (docs/bench/ENGINE.md).
type renewals = periodic.Queue[*hold]

// newRenewals renews each hold every period, each on its own goroutine (a
// store that is slow for one must not delay the others' renewals).
func newRenewals(every time.Duration) *renewals {
	return periodic.New(every, func(due []*hold) {
		for _, h := range due {
			go h.renew()
		}
	})
}

// hold is one reservation while its operation runs: the context the
// operation runs with (runContext) and the renewal of its lease. The
// lease is renewed every third of its length
// (by the engine's renewals) until stop is called. If the lease is lost,
// the operation's context is canceled with cause ErrLeaseLost so it can
// stop early.
//
// The holder is the first to know its lease is over. It counts the lease
// on its own monotonic clock from the moment it sent the reservation or
// the last renewal the store accepted: the store (or a taker watching the
// record) starts counting no earlier than the request arrived, so no other
// client can judge the lease over before the holder does, whatever the
// clocks of the machines say. The holder gives up leaseMargin before that,
// for the drift of clock rates. It does not wait for a renewal's error to
// learn it: a renewal that hangs would tell it too late.
type hold struct {
	runContext
	e *Engine
	f store.Fence

	// link places the hold in e.renewals.
	link periodic.Link[*hold]

	mu      sync.Mutex
	stopped bool // guarded by mu
	running sync.WaitGroup
	// until is when the holder counts its lease over (monotonic); guarded
	// by mu.
	until time.Time
	// expire fires at until while renewals fail; nil while they succeed.
	// Guarded by mu.
	expire *time.Timer
	// gone: the lease is over, by the store's word or the holder's count;
	// no more renewals. Guarded by mu.
	gone bool
}

// leaseMargin is how long before a lease has passed since its request was
// sent that the holder gives it up: a twentieth of the lease, for clock
// rates that differ between machines (parts per million on healthy hosts).
func leaseMargin(lease time.Duration) time.Duration { return lease / 20 }

// newHold starts renewing f's lease, whose reservation was sent at sent;
// the operation runs with h.ctx().
func (e *Engine) newHold(ctx context.Context, f store.Fence, sent time.Time) *hold {
	h := &hold{runContext: newRunContext(ctx, f.Token), e: e, f: f}
	h.until = e.leaseEnd(sent)
	e.renewals.Add(&h.link, h)
	return h
}

// leaseEnd is when a holder that sent its reservation or renewal at sent
// counts its lease over.
func (e *Engine) leaseEnd(sent time.Time) time.Time {
	return sent.Add(e.policy.Lease - leaseMargin(e.policy.Lease))
}

// ctx is the context the operation runs with.
func (h *hold) ctx() context.Context { return &h.runContext }

// renew renews the lease once (the renewals call it when it is due), and
// puts the hold back in line for the next unless the lease is lost.
func (h *hold) renew() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.running.Add(1)
	h.mu.Unlock()
	defer h.running.Done()
	e := h.e
	// Not the operation's context: a client that hangs up cancels that,
	// and an operation that runs on regardless must keep its lease, or a
	// retry would take the key over and run it a second time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.Context), e.renewals.Period())
	sent := time.Now()
	err := e.store.Renew(ctx, h.f, e.policy.Lease)
	cancel()
	if errors.Is(err, store.ErrLeaseLost) {
		h.lose(ErrLeaseLost)
		return
	}
	h.mu.Lock()
	if err != nil {
		// The next renewal may get through before the lease runs out; if
		// none does, expire gives the lease up when it does.
		e.logger.Warn("idem: lease renewal failed", e.logAttrs(slog.LevelWarn, h.f.Scope, "", "err", err)...)
		if h.expire == nil && !h.stopped {
			h.expire = time.AfterFunc(time.Until(h.until), h.expired)
		}
	} else {
		h.until = e.leaseEnd(sent)
		if h.expire != nil {
			h.expire.Stop()
			h.expire = nil
		}
	}
	if !h.stopped && !h.gone {
		e.renewals.Add(&h.link, h)
	}
	h.mu.Unlock()
}

// expired runs when the holder's count of its lease ran out while its
// renewals failed.
func (h *hold) expired() {
	h.mu.Lock()
	if h.stopped || h.expire == nil {
		h.mu.Unlock()
		return
	}
	if left := time.Until(h.until); left > 0 {
		// A renewal got through meanwhile and a later one failed.
		h.expire.Reset(left)
		h.mu.Unlock()
		return
	}
	h.expire = nil
	h.mu.Unlock()
	h.lose(ErrLeaseExpired)
}

// lose ends the hold's lease: no more renewals, and the operation's
// context canceled with cause ErrLeaseLost. Its completion is still
// fenced by the store: it lands only if nobody took the key over.
func (h *hold) lose(cause error) {
	h.mu.Lock()
	already := h.gone
	h.gone = true
	h.mu.Unlock()
	if already {
		return
	}
	h.e.logger.Warn("idem: lease lost; the operation's context is canceled",
		h.e.logAttrs(slog.LevelWarn, h.f.Scope, "", "err", cause)...)
	h.end(cause)
}

// stop ends the renewals; a renewal in flight finishes before stop
// returns, so that it never lands after the outcome is written.
func (h *hold) stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	if h.expire != nil {
		h.expire.Stop()
		h.expire = nil
	}
	h.mu.Unlock()
	h.e.renewals.Remove(&h.link)
	h.running.Wait()
}
