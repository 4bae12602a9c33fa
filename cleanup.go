package idem

import (
	"context"
	"time"
)

// cleanupBatch is how many records one Cleanup call removes; small batches
// keep each store transaction (and its locks) short.
const cleanupBatch = 1000

// maybeCleanup starts a background cleanup when the last one is older than
// the policy's CleanupInterval: every call may trigger it, but not more
// often than the interval. At most one runs at a time per engine
// family.
func (e *Engine) maybeCleanup() {
	if e.policy.CleanupInterval < 0 {
		return
	}
	now := e.now().UnixNano()
	recent := func() bool {
		last := e.lastClean.Load()
		return last != 0 && now-last < int64(e.policy.CleanupInterval)
	}
	// Every call comes here: read without the lock, which only the call
	// that starts a cleanup needs.
	if recent() {
		return
	}
	e.cleanMu.Lock()
	if e.closed || e.cleaning || recent() {
		e.cleanMu.Unlock()
		return
	}
	e.cleaning = true
	e.lastClean.Store(now)
	e.cleanWG.Add(1)
	e.cleanMu.Unlock()

	go func() {
		defer e.cleanWG.Done()
		defer func() {
			e.cleanMu.Lock()
			e.cleaning = false
			e.cleanMu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := e.Cleanup(ctx, cleanupBatch, nil)
		if err != nil {
			e.logger.Warn("idem: background cleanup failed", "removed", n, "err", err)
			return
		}
		if n > 0 {
			e.logger.Debug("idem: background cleanup", "removed", n)
		}
	}()
}

// Cleanup removes every record expired on the store's clock, in batches of
// batch records (1000 when batch <= 0), calling progress with the running
// total after each batch. It returns how many it removed. `idem cleanup`
// runs it; engines also run it in the background.
func (e *Engine) Cleanup(ctx context.Context, batch int, progress func(removed int)) (int, error) {
	if batch <= 0 {
		batch = cleanupBatch
	}
	total := 0
	for {
		n, err := e.store.Cleanup(ctx, batch)
		total += n
		if err != nil {
			return total, &StoreError{Op: "cleanup", Err: err}
		}
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < batch {
			return total, nil
		}
	}
}

// Close stops background cleanup and the freeing of reservations whose
// answer was lost, and waits for them to finish. It does not close the
// store. Calls to Do still work after Close.
func (e *Engine) Close() error {
	e.cleanMu.Lock()
	e.closed = true
	e.cleanMu.Unlock()
	e.signalClose()
	e.cleanWG.Wait()
	return nil
}
