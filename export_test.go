package idem

// WaitCleanup waits for e's running background cleanup, if any.
func WaitCleanup(e *Engine) { e.cleanWG.Wait() }
