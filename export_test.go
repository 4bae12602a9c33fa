package idem

import "time"

// WaitCleanup waits for e's running background cleanup, if any.
func WaitCleanup(e *Engine) { e.cleanWG.Wait() }

// SetPolling sets how often e's waiters read the record: from start,
// doubling up to max. Tests set both to hours to prove that a waiter was
// woken, not polled.
func SetPolling(e *Engine, start, max time.Duration) { e.pollStart, e.pollCap = start, max }

// Waiters returns how many callers of e wait, in process, for keyHash.
func Waiters(e *Engine, keyHash string) int { return e.waiters.Waiting(keyHash) }

// SetCompleteTimeout bounds how long e retries the write that ends a call.
func SetCompleteTimeout(e *Engine, d time.Duration) { e.completeTimeout = d }
