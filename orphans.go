package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idem-dev/idem/store"
)

// A reservation whose answer never came back: the store applied it, then
// the connection broke (a network cut, a store failover, the caller's
// context ending mid-round-trip), and Do answered ErrStoreUnavailable. The
// record is in_progress under a token nobody holds, so the caller's retry
// would be told ErrInProgress until the lease ran out (60 s by default), or
// until the record expired under OnStaleConflict. The operation never ran
// under that token, so the engine gives the key back itself, fenced by the
// token, as soon as the store answers again: the retry then runs at once.
// A Reserve that failed before reaching the store costs one Release that
// finds nothing to free.

const (
	// maxOrphans bounds the reservations waiting to be freed; past it,
	// a reservation waits out its lease. A long outage under heavy
	// traffic fills it with reservations that mostly never reached the
	// store.
	maxOrphans = 10000
	// orphanTry bounds one Release attempt. The retries back off as
	// the engine's other store writes do (storeRetryFirst to
	// storeRetryCap): one attempt per pause, not one per reservation.
	orphanTry = 5 * time.Second
)

// orphan is a reservation to free, until when freeing it is worth it.
type orphan struct {
	st    store.Store
	fence store.Fence
	until time.Time
}

// orphans is the engine family's queue of reservations to free, drained by
// one goroutine at a time. Its fields are guarded by shared.cleanMu.
type orphans struct {
	pending  []orphan
	draining bool
	dropped  int // refused for want of room since the last warning
}

// freeOrphan queues rec, which a failed Reserve may have written, to be
// released in the background.
func (e *Engine) freeOrphan(rec store.Record) {
	// Once the lease has run out, the next call takes the key over anyway
	// (OnStaleRetry); under OnStaleConflict the record would stand until
	// it expires.
	// Counted on the monotonic clock, as the holder counts its lease.
	until := time.Now().Add(e.policy.Lease)
	if e.policy.OnStale == OnStaleConflict {
		until = time.Now().Add(e.policy.TTL)
	}
	o := orphan{st: e.store, fence: store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token}, until: until}
	e.cleanMu.Lock()
	defer e.cleanMu.Unlock()
	q := &e.orphans
	if e.closed {
		return
	}
	if len(q.pending) >= maxOrphans {
		if q.dropped++; q.dropped == 1 {
			e.logger.Warn("idem: too many reservations with a lost answer to free; the rest wait out their lease",
				"pending", len(q.pending))
		}
		return
	}
	q.pending = append(q.pending, o)
	if q.draining {
		return
	}
	q.draining = true
	e.cleanWG.Add(1)
	go e.drainOrphans()
}

// drainOrphans releases the queued reservations until none is left, backing
// off while the store fails. Close stops it.
func (e *Engine) drainOrphans() {
	defer e.cleanWG.Done()
	backoff := storeRetryFirst
	for {
		e.cleanMu.Lock()
		batch := e.orphans.pending
		e.orphans.pending = nil
		if len(batch) == 0 || e.closed {
			e.orphans = orphans{}
			e.cleanMu.Unlock()
			return
		}
		e.cleanMu.Unlock()

		var left []orphan
		failing := false
		for _, o := range batch {
			if !time.Now().Before(o.until) {
				continue
			}
			if failing {
				left = append(left, o)
				continue
			}
			switch err := e.releaseOrphan(o); {
			case err == nil:
				backoff = storeRetryFirst
			case errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound):
				// Never written, or taken over since: nothing of ours
				// to free.
			case errors.Is(err, store.ErrClosed) || e.closeCtx.Err() != nil:
				e.stopDraining()
				return
			default:
				// Down still: one attempt per pause, whatever the queue.
				failing = true
				left = append(left, o)
			}
		}
		e.cleanMu.Lock()
		e.orphans.pending = append(left, e.orphans.pending...)
		e.cleanMu.Unlock()
		if !failing {
			continue
		}
		select {
		case <-e.closeCtx.Done():
			e.stopDraining()
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, storeRetryCap)
	}
}

// stopDraining empties the queue: the store or the engine is closed.
func (e *Engine) stopDraining() {
	e.cleanMu.Lock()
	e.orphans = orphans{}
	e.cleanMu.Unlock()
}

func (e *Engine) releaseOrphan(o orphan) error {
	ctx, cancel := context.WithTimeout(e.closeCtx, orphanTry)
	defer cancel()
	if err := o.st.Release(ctx, o.fence); err != nil {
		return err
	}
	e.logger.Info("idem: freed a reservation whose answer was lost; the key can run again",
		e.logAttrs(slog.LevelInfo, o.fence.Scope, "")...)
	e.announce(ctx, o.fence.Scope, o.fence.KeyHash, nil)
	if e.onFreed != nil {
		e.onFreed(o.fence.Scope) // after the waiters are woken: they need not wait for it
	}
	return nil
}
