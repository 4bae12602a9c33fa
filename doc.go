// Package idem makes retries safe.
//
// A client attaches an idempotency key to a mutating call. idem makes sure
// the work behind it starts at most once per key, and that every retry with
// the same key gets the first call's outcome back, even when calls race,
// processes crash, and many replicas share one store.
//
// # The engine
//
// An Engine runs operations through Do. Give it a store and a policy:
//
//	eng := idem.New(memory.New(), idem.Policy{TTL: 24 * time.Hour})
//	res, err := eng.Do(ctx, idem.Call{
//		Scope:       "charge_customer",
//		Key:         "charge-ORD-123",
//		Fingerprint: fp, // idem.HashJSON(input)
//	}, func(ctx context.Context) ([]byte, error) {
//		return charge(ctx, input)
//	})
//
// Of any number of concurrent calls with one (scope, key), across any number
// of processes sharing the store, exactly one runs the operation. The others
// get its outcome (res.Replayed is true) or an error that errors.Is matches:
//
//	ErrInProgress           the first call is still running (409)
//	ErrFingerprintMismatch  same key, different request (422)
//	ErrKeyReused            same key, another action or target (422)
//	ErrPreviousFailure      the first call failed and the policy keeps it
//	ErrOutcomeUnknown       the first call started and its outcome is unknown (409)
//	ErrInvalidKey           empty, too long or non-printable key (400)
//	ErrStoreUnavailable     the store failed; nothing ran (503)
//
// # Records, leases and fencing
//
// The store keeps one record per key, by a SHA-256 that frames scope and key
// (store.HashKey), and the engine replays a record, or answers a conflict
// with it, only to the call whose scope and key it holds. A
// record is in_progress while its holder runs, then succeeded or failed. The
// holder renews a lease while it works; if it dies, the record goes stale
// after Policy.Lease and, under OnStaleRetry (the default), the next call
// with the same request takes it over and runs the operation again: the one
// place where idem is at-least-once. Every write that ends a reservation is
// fenced by the holder's token, so a holder that was taken over can never
// overwrite the new holder's outcome.
//
// When a holder cannot record its outcome (it was paused past its lease
// and taken over, or the store kept failing), Do still returns the value
// its operation produced, with Result.NotRecorded set and an error matching
// ErrLeaseLost or ErrStoreUnavailable: that value is not what retries will
// get, and must not be shown as the key's outcome. Inside the operation,
// TokenFromContext gives the token, which an upstream can use to reject a
// holder that lost its lease.
//
// # Unknown outcomes
//
// An operation that started its work and cannot tell whether it took effect
// (the upstream took the request and never answered, the connection was
// cut halfway through the response) returns an error wrapping
// ErrOutcomeUnknown; a panic in the operation counts as the same. Under
// OnUnknownConflict (the default) the key is never released for it: retries
// get ErrOutcomeUnknown, naming the first request, until the record expires
// or an operator who checked what happened calls Engine.Release. Under
// OnUnknownRelease the key is released and a retry runs the operation again.
// An operation that failed before doing anything returns ErrNotExecuted and
// its key is always released.
//
// # Waiting
//
// With Policy.Wait, a duplicate of a running call waits for its outcome
// instead of answering ErrInProgress. A waiter is woken as soon as the
// holder ends: by the holder itself, which hands its outcome over, when it
// runs in the same process; through the store when it runs in another and
// the store implements store.Notifier (PostgreSQL LISTEN/NOTIFY, Redis
// pub/sub). Waiters poll as well, as a safety net, at most every
// DefaultPollCap (WithWaitPolling changes it).
//
// Records expire after Policy.TTL. Expired records are treated as absent,
// and a background cleanup, throttled to once per Policy.CleanupInterval,
// deletes them.
//
// # Fingerprints
//
// HashBytes, HashJSON, HashJSONBytes and HashJSONFields compute request
// fingerprints; CanonicalJSON makes key order and white space irrelevant.
//
// # Stores
//
// Package store defines the store contract, and store/storetest the
// conformance suite. Stores: store/memory (tests), store/file (embedded, on
// disk, the gateway's default), store/postgres and store/redis (shared by
// many processes).
//
// HTTP services use package idemhttp; any HTTP API can sit behind the idem
// gateway (cmd/idem).
package idem
