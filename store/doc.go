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
// # One clock for a lease
//
// Replicas' clocks disagree (a VM resumed from suspend, a host whose NTP
// broke, a leap smear), so a lease or an expiry is never judged by
// comparing one machine's clock with another's. Callers send durations
// (ReserveRequest.Lease and TTL, Renew's lease, Completion.TTL), and:
//
//   - a store with a clock judges on it: PostgreSQL's server time, Redis's
//     TIME and native expiry, the process's monotonic clock for the
//     embedded stores (whose leases therefore survive a jump of the wall
//     clock);
//   - a store without one (S3, DynamoDB) uses observe and wait: a would-be
//     taker notes the holder's record version (an ETag, a renewal counter)
//     when it first sees it, and takes over, by a write conditional on that
//     same version, only after it has itself watched a full lease pass on
//     its own monotonic clock with no renewal (store/internal/leasewatch).
//     Its expiry is judged on the server's clock as its answers carry it
//     (the HTTP Date of the response against the object's Last-Modified).
//
// The holder counts its lease from the moment it sent the reservation or
// the renewal, on its own monotonic clock, and gives the lease up there:
// before any other client can judge it over, whatever their clocks say.
// Skew between replicas then costs a delay at most, never a second run of
// a live holder's key.
//
// A store may also implement Notifier, an optional capability: it carries
// word that a record left in_progress to waiters in other processes, so
// that they need not poll. A store that can hold no record an earlier
// version of idem wrote (the memory store, empty at every start) may say
// so (LegacyFree): engines over it then look for none.
//
// Every store runs the conformance suite in package storetest.
package store
