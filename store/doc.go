// Package store defines the contract between idem's engine and the places
// it keeps idempotency records.
//
// Most users never touch this package: they construct a store
// (memory.New, file.Open, postgres.New, redisstore.New) and hand it to idem.New.
// It is for people writing a new store. A store is a small, dumb, atomic
// key-value table: the engine decides what an existing record means (replay,
// conflict, wait); the store only guarantees that the transitions below are
// atomic across every process that shares it.
//
// A record goes through these transitions:
//
//	absent or expired --Reserve--> in_progress (token T)
//	in_progress, lease over --Reserve with TakeOverStale--> in_progress (token T')
//	in_progress (T) --Renew(T)--> in_progress (T), lease extended
//	in_progress (T) --Complete(T)--> succeeded | failed
//	in_progress (T) --Release(T)--> absent
//	failed (T) --Release(T)--> absent (an operator frees an unknown outcome)
//	expired --Cleanup--> absent
//
// Every transition out of in_progress is fenced by the token of the holder
// that reserved it: a holder whose lease was taken over gets ErrLeaseLost
// and cannot overwrite the new holder's record.
//
// A succeeded record is never released: an outcome a client may have seen
// stays until it expires.
//
// A store may also implement Notifier, an optional capability: it carries
// word that a record left in_progress to waiters in other processes, so
// that they need not poll.
//
// Every store runs the conformance suite in package storetest.
package store
