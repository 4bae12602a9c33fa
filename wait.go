package idem

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/idem-dev/idem/store"
)

// waiting is a call's wait for the running call that holds its key
// (Policy.Wait), across the reads of the record in Do's loop.
type waiting struct {
	e       *Engine
	keyHash string
	// until ends the wait, on the monotonic clock, not the injected one:
	// a test's frozen clock must not make a caller wait forever. Zero
	// when the policy does not wait.
	until   time.Time
	waiter                // the subscription to the holder's end, once made
	woken   bool          // the last wait ended by a wake-up: read, do not reserve (see ended)
	waited  bool          // the call waited at least once
	handed  *store.Record // the outcome handed over by the holder, for the next read
	backoff time.Duration // the next poll interval
}

func (e *Engine) newWait(keyHash string) waiting {
	w := waiting{e: e, keyHash: keyHash, backoff: e.pollStart}
	if e.policy.Wait > 0 {
		w.until = time.Now().Add(e.policy.Wait)
	}
	return w
}

// wait answers call c, whose key is held by the running call of ex. It
// answers at once, again reports false and err is ErrInProgress's
// conflict, when the policy does not wait, the wait is over, or ex is
// stale (a stale record reaches here only under OnStaleConflict, and
// waiting for it is pointless). Otherwise it waits to be woken or for the
// next poll, and again reports true: the caller reads the record again.
func (w *waiting) wait(ctx context.Context, c Call, ex store.Record) (res Result, err error, again bool) {
	left := time.Until(w.until)
	if w.until.IsZero() || ex.Stale() || left <= 0 {
		return Result{Waited: w.waited}, w.e.inProgress(c, ex), false
	}
	if !w.subscribed() {
		// Subscribe, then read the record again: a holder that ended
		// between the read above and the subscription woke nobody.
		w.start(ctx, w.e, c.Scope, w.keyHash)
		return Result{}, nil, true
	}
	// Wait to be woken: by the holder itself when it runs in this
	// process, by the store's Notifier when it runs in another. Poll
	// all the same, as a safety net for a notification that never
	// comes (a holder that died, a listener that reconnected); with a
	// notifier listening, at the poll cap at once. Jitter spreads the
	// pollers of one key.
	if w.remote != nil {
		w.backoff = w.e.pollCap
	}
	w.waited = true
	d := min(w.backoff+rand.N(w.backoff/2+1), left)
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return Result{}, context.Cause(ctx), false
	case <-w.local:
		t.Stop()
		w.handed, _ = w.value().(*store.Record)
		w.stop()
		w.woken = true
	case <-w.remote:
		t.Stop()
		// A record carried by the notification is the outcome only
		// when it ends the holding we wait for: one of an earlier
		// holder, whose notification came late, is left to a read.
		if r := w.carried(); r != nil && r.Token == ex.Token {
			w.handed = r
		}
		w.stop()
		w.woken = true
	case <-t.C:
	}
	w.backoff = min(w.backoff*2, w.e.pollCap)
	return Result{}, nil, true
}

// ended returns the record of keyHash when a woken waiter finds it
// completed. A read answers it: on stores whose reservation writes even
// when it finds a record (PostgreSQL's takes a row lock), a crowd of woken
// duplicates would otherwise queue on the row the holder just released.
// Anything else (released, still or again in progress, a store error) is
// left to Reserve.
func (e *Engine) ended(ctx context.Context, woken bool, scope, keyHash string) (store.Record, bool) {
	if !woken {
		return store.Record{}, false
	}
	cur, err := e.store.Get(ctx, scope, keyHash)
	if err != nil || cur.State == store.InProgress {
		return store.Record{}, false
	}
	return cur, true
}

// waiter is a caller's subscription to the end of the call that holds its
// key: local is woken by a holder in this process, remote (nil when the
// store is no Notifier or cannot listen now) by a holder anywhere.
type waiter struct {
	local, remote  <-chan struct{}
	value          func() any
	record         func() *store.Record // what remote's notification carried
	unsubL, unsubR func()
}

func (w *waiter) subscribed() bool { return w.local != nil }

// carried returns the record remote's notification carried, or nil.
func (w *waiter) carried() *store.Record {
	if w.record == nil {
		return nil
	}
	return w.record()
}

func (w *waiter) start(ctx context.Context, e *Engine, scope, keyHash string) {
	w.local, w.value, w.unsubL = e.waiters.SubscribeValue(keyHash)
	if rn, ok := e.notifier.(store.RecordNotifier); ok {
		ch, rec, unsub, err := rn.SubscribeRecord(ctx, scope, keyHash)
		if err == nil {
			w.remote, w.record, w.unsubR = ch, rec, unsub
		}
	} else if n := e.notifier; n != nil {
		ch, unsub, err := n.Subscribe(ctx, scope, keyHash)
		if err == nil {
			w.remote, w.unsubR = ch, unsub
		}
	}
}

func (w *waiter) stop() {
	if w.unsubL != nil {
		w.unsubL()
	}
	if w.unsubR != nil {
		w.unsubR()
	}
	*w = waiter{}
}
