// Package history checks that a store's operations are linearizable: that
// every history of concurrent Reserve, Get, Renew, Complete and Release
// calls, recorded with the time each was called and returned, can be
// explained by the record state machine of package store taking them one
// at a time, each at some instant between its call and its return.
//
// Several clients (goroutines, over a store and a second client of its
// backend where it has one) run random operations on a few keys with
// short leases, so that reservations race, stale holders are taken over
// and fenced off, and records are completed, failed and released while
// others read them. The checker is porcupine
// (github.com/anishathalye/porcupine), the one etcd's robustness tests
// use; the model is store/doc.go's state machine, per key:
//
//	absent --Reserve--> in_progress(T)
//	in_progress(T), lease over --Reserve with TakeOverStale, same fingerprint and binding--> in_progress(T')
//	in_progress(T) --Renew(T)--> in_progress(T)
//	in_progress(T) --Complete(T)--> succeeded(T, v) | failed(T, v)
//	in_progress(T) | failed(T) --Release(T)--> absent
//
// Renew, Complete and Release succeed with the record's current token and
// fail with store.ErrLeaseLost otherwise (a Complete that repeats the
// completion its token made may succeed again: a store may recognise a
// retry whose first reply was lost); Get and a refused Reserve's
// Existing report the current record (state, token, fingerprint, binding,
// request ID, value). Records live an hour, so nothing expires during a
// history and expiry is left out of the model.
//
// Whether a lease is over is the store's to judge on its own clock, so the
// model lets the store judge either way, within what time allows: a lease
// set by a call at instant c with duration d cannot be over before c + d,
// so a takeover (or a record reported stale) must return no earlier than
// that. A store that takes a live holder's key over, or lets two clients
// both acquire a key, fails the check.
//
// A call that failed with an error that does not say what happened (a
// timeout, a lost connection: anything but ErrLeaseLost from Renew,
// Complete or Release, or ErrNotFound from Get) may or may not have taken
// effect: it is checked as an operation whose outcome is unknown and whose
// return lies at the end of the history, as porcupine's tests model lost
// replies, so that its effect, if any, may fall anywhere after its call. A
// call cut by a kill -9 is unknown too, but returns at the kill: an
// embedded store does nothing once its process is dead.
//
// Check records and checks one history of a store (the conformance
// suite's "Linearizable" case runs it on every store); RunCrash does it
// across kill -9 and restart of an embedded store, and RunCrashOneSync for
// one that returns a reservation that may be taken over before its sync:
// the kill is then an operation of every key, which may undo such a
// reservation that no later synced write of its key covered. On a failure, the
// history is drawn with porcupine's visualizer and the operations of the
// key that cannot be ordered are listed.
package history
