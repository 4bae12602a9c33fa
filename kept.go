package idem

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idem-dev/idem/store"
)

// An outcome that could not be recorded is not forgotten. When the write
// that ends a reservation fails (a full disk, a store that went away) and
// its quick retries fail too, the engine keeps the outcome in memory: it
// writes it as soon as the store accepts, renews the key's lease meanwhile
// so that no other replica takes the key over, and answers retries of the
// key in this process from what it holds. Only a holder that dies falls
// back on the lease rule (OnStale). The caller of Do still gets
// ErrStoreUnavailable with Result.NotRecorded: the outcome is not durable
// until it is written, so it must not be shown as the key's yet. An
// outcome whose record the store lost is kept the same way while its
// write-back waits for the store (see writeBack).

// maxKept and maxKeptBytes bound what the engine family holds: past them an
// outcome that could not be written is not kept (the lease rule applies).
const (
	maxKept      = 1024
	maxKeptBytes = 64 << 20
)

// kept is one outcome waiting to be written.
type kept struct {
	rec     store.Record // the record as it is to be stored: state, value; guarded by keeper.mu once kept
	release bool         // the end to write is a release, not a completion
	// rewrite: the store lost the key's record (writeBack); the outcome
	// is written as a new record, reserved first under rec.Token, a token
	// of its own. Guarded by keeper.mu once kept.
	rewrite bool
	// rewritten: a write-back was reserved; a record lost again is not
	// written back twice.
	rewritten bool
	ttl       time.Duration
	lease     time.Duration
	renewed   time.Time // when its lease was last renewed (monotonic)
	until     time.Time // past this it would have expired anyway: dropped
	e         *Engine   // whose policy wrote it, for its notifications
}

// keeper holds the kept outcomes of an engine family. The zero value is
// ready to use.
type keeper struct {
	mu      sync.Mutex
	byKey   map[string]*kept // by key hash; guarded by mu
	bytes   int              // guarded by mu
	running bool             // a goroutine writes them; guarded by mu
}

// keep hands an outcome whose write failed over to the keeper. It reports
// false when the keeper is full or closed: the outcome is then lost to the
// store, as before, and the lease rule applies to the key.
func (e *Engine) keep(rec store.Record, release bool) bool {
	return e.keepThis(e.newKept(rec, release))
}

// newKept is the outcome rec (or its release) to be written by e.
func (e *Engine) newKept(rec store.Record, release bool) *kept {
	return &kept{rec: rec, release: release, ttl: e.policy.TTL, lease: e.policy.Lease,
		renewed: time.Now(), until: time.Now().Add(e.policy.TTL), e: e}
}

// keepThis hands k over to the keeper, as keep does.
func (e *Engine) keepThis(k *kept) bool {
	rec := k.rec
	kp := &e.keeper
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.byKey == nil {
		kp.byKey = make(map[string]*kept)
	}
	if len(kp.byKey) >= maxKept || kp.bytes+len(rec.Value) > maxKeptBytes {
		return false
	}
	if !kp.running {
		// Under cleanMu, as every start of background work: Close waits
		// for what started before it, and nothing starts after.
		e.cleanMu.Lock()
		closed := e.closed
		if !closed {
			e.cleanWG.Add(1)
		}
		e.cleanMu.Unlock()
		if closed {
			return false
		}
		kp.running = true
		go e.writeKept()
	}
	if old := kp.byKey[rec.KeyHash]; old != nil {
		kp.bytes -= len(old.rec.Value)
	}
	kp.byKey[rec.KeyHash] = k
	kp.bytes += len(rec.Value)
	e.logger.Warn("idem: outcome not recorded; kept in memory until the store accepts it",
		e.logAttrs(slog.LevelWarn, rec.Scope, "", "request_id", rec.RequestID, "state", string(rec.State))...)
	return true
}

// keptRecord returns the kept outcome of keyHash, as a retry should find
// it, when this process holds one.
func (e *Engine) keptRecord(keyHash string) (store.Record, bool) {
	kp := &e.keeper
	kp.mu.Lock()
	defer kp.mu.Unlock()
	k := kp.byKey[keyHash]
	if k == nil || k.release {
		// A key to be released answers as the store has it: in progress
		// under this holder's renewed lease, until the release lands.
		return store.Record{}, false
	}
	r := k.rec
	r.ReadAt, r.LeaseLeft = time.Now(), 0
	return r, true
}

// Kept reports how many outcomes this engine family holds because the
// store would not take them yet.
func (e *Engine) Kept() int {
	e.keeper.mu.Lock()
	defer e.keeper.mu.Unlock()
	return len(e.keeper.byKey)
}

// writeKept writes the kept outcomes until none is left, renewing their
// leases while the store refuses them. Close stops it.
func (e *Engine) writeKept() {
	defer e.cleanWG.Done()
	kp := &e.keeper
	backoff := storeRetryFirst
	for {
		kp.mu.Lock()
		batch := make([]*kept, 0, len(kp.byKey))
		for _, k := range kp.byKey {
			batch = append(batch, k)
		}
		if len(batch) == 0 || e.closeCtx.Err() != nil {
			if n := len(batch); n > 0 {
				e.logger.Error("idem: closing with outcomes not recorded; their keys fall back on the lease rule", "kept", n)
			}
			kp.byKey, kp.bytes, kp.running = nil, 0, false
			kp.mu.Unlock()
			return
		}
		kp.mu.Unlock()

		failing := false
		for _, k := range batch {
			switch done, _, err := e.writeOne(k); {
			case done:
				kp.drop(k)
			case err != nil:
				failing = true
			}
		}
		if !failing {
			backoff = storeRetryFirst
			continue
		}
		select {
		case <-e.closeCtx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, storeRetryCap)
	}
}

// drop forgets k, unless a newer outcome of its key replaced it.
func (kp *keeper) drop(k *kept) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.byKey[k.rec.KeyHash] == k {
		delete(kp.byKey, k.rec.KeyHash)
		kp.bytes -= len(k.rec.Value)
	}
}

// writeOne tries k's write once. done: k needs no more writing (written,
// or the key is no longer this holder's); wrote: k's outcome is the key's
// record now; err: the store still refuses.
func (e *Engine) writeOne(k *kept) (done, wrote bool, err error) {
	if time.Now().After(k.until) {
		e.logger.Error("idem: a kept outcome outlived its lifetime unwritten; dropped", e.logAttrs(slog.LevelError, k.rec.Scope, "")...)
		return true, false, nil
	}
	ctx, cancel := context.WithTimeout(e.closeCtx, min(e.completeTimeout, 5*time.Second))
	defer cancel()
	if k.rewrite {
		if done, err := e.reserveWriteBack(ctx, k); done || err != nil {
			return done, false, err
		}
	}
	f := store.Fence{KeyHash: k.rec.KeyHash, Scope: k.rec.Scope, Token: k.rec.Token}
	if k.release {
		err = e.store.Release(ctx, f)
	} else {
		err = e.store.Complete(ctx, store.Completion{Fence: f, State: k.rec.State, Value: k.rec.Value, TTL: k.ttl})
	}
	switch {
	case err == nil:
		msg := "idem: kept outcome recorded"
		if k.rewritten {
			msg = "idem: a lost record's outcome written back"
		}
		e.logger.Info(msg, e.logAttrs(slog.LevelInfo, f.Scope, "", "request_id", k.rec.RequestID)...)
		var final *store.Record
		if !k.release {
			final = &k.rec
		}
		k.e.announce(ctx, f.Scope, f.KeyHash, final)
		return true, true, nil
	case errors.Is(err, store.ErrLeaseLost):
		wrote, lost := e.wroteIt(ctx, k.rec, k.release, k.rec.State, k.rec.Value)
		if lost {
			e.recordLost(f.Scope)
		}
		switch {
		case wrote:
			k.e.announce(ctx, f.Scope, f.KeyHash, nil)
			return true, true, nil
		case lost && !k.rewritten:
			e.keeper.rewriteAs(k, newToken(e.now()))
			return false, false, nil
		case lost:
			e.logger.Error("idem: the store lost a written-back outcome's record again; dropped, a retry runs the key again", e.logAttrs(slog.LevelError, f.Scope, "")...)
		default:
			e.logger.Warn("idem: a kept outcome's key was taken over; its outcome stands", e.logAttrs(slog.LevelWarn, f.Scope, "")...)
		}
		return true, false, nil
	}
	// Keep the key held while the store refuses the outcome: a renewal
	// may get through where a larger write does not.
	if time.Since(k.renewed) >= k.lease/3 {
		rerr := e.store.Renew(ctx, f, k.lease)
		switch {
		case rerr == nil:
			k.renewed = time.Now()
		case errors.Is(rerr, store.ErrLeaseLost):
			e.logger.Warn("idem: a kept outcome's key was taken over; its outcome stands", e.logAttrs(slog.LevelWarn, f.Scope, "")...)
			return true, false, nil
		}
	}
	return false, false, err
}

// A holder whose end finds its key's record gone (wroteIt: lost), not
// held by another caller, writes its outcome back as a new record: it
// reserves the key anew with a token of its own, if the key is still
// absent, then completes that reservation. A key that ran to its end must
// not run again because the store lost its record (a failover to a replica
// that never had it, or an operator's release of a holder judged stale):
// preventing that second run is what idem is for. If another call
// reserved the key first, that call runs or ran the key again: the
// outcome is dropped (the loss is counted all the same, see recordLost).
// Until the write-back lands the outcome is kept, as any unrecorded one.

// writeBack is the outcome rec (state, value) whose record the store lost,
// to be written back as a new record (see reserveWriteBack).
func (e *Engine) writeBack(rec store.Record) *kept {
	k := e.newKept(rec, false)
	k.rewrite, k.rec.Token = true, newToken(e.now())
	return k
}

// rewriteAs marks k, whose record the store lost, to be written back
// under token.
func (kp *keeper) rewriteAs(k *kept, token uint64) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	k.rewrite, k.rec.Token = true, token
}

// reserveWriteBack reserves the key of k, marked rewrite, under k's own
// token, where no record holds it. done: another call's record holds the
// key, and k is dropped. A reservation whose answer was lost is found by
// its token on the next try.
func (e *Engine) reserveWriteBack(ctx context.Context, k *kept) (done bool, err error) {
	r := k.rec
	r.State, r.Value = store.InProgress, nil
	res, err := e.store.Reserve(ctx, store.ReserveRequest{Record: r, Lease: k.lease, TTL: k.ttl})
	if err != nil {
		return false, err
	}
	if res.Acquired || (res.Existing.Token == r.Token && res.Existing.State == store.InProgress) {
		e.keeper.mu.Lock()
		k.rewrite, k.rewritten = false, true
		e.keeper.mu.Unlock()
		k.renewed = time.Now()
		return false, nil
	}
	e.logger.Warn("idem: another call reserved the key before a lost record's outcome was written back; the outcome is dropped and the key runs again",
		e.logAttrs(slog.LevelWarn, r.Scope, "", "request_id", r.RequestID)...)
	return true, nil
}
