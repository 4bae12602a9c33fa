package idem

import "time"

// WaitCleanup waits for e's running background cleanup, if any.
func WaitCleanup(e *Engine) { e.cleanWG.Wait() }

// Waiters returns how many callers of e wait, in process, for keyHash.
func Waiters(e *Engine, keyHash string) int { return e.waiters.Waiting(keyHash) }

// SetCompleteTimeout bounds how long e retries the write that ends a call.
func SetCompleteTimeout(e *Engine, d time.Duration) { e.completeTimeout = d }
