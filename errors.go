package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-dev/idem/store"
)

// Sentinel errors. Every error Do returns for a conflict, an invalid key or
// a store failure matches one of them with errors.Is; the typed errors below
// carry the details.
var (
	// ErrInvalidKey: the key is empty, too long or not printable (HTTP 400).
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrInProgress: another call with the key is still running (HTTP 409).
	ErrInProgress = errors.New("idem: a request with this key is in progress")
	// ErrFingerprintMismatch: the key was used with a different request
	// (HTTP 422, conflict_type payload_mismatch).
	ErrFingerprintMismatch = errors.New("idem: key reused with a different request")
	// ErrKeyReused: the key is bound to another action or target (HTTP 422,
	// conflict_type key_reused).
	ErrKeyReused = errors.New("idem: key bound to another action or target")
	// ErrPreviousFailure: the first call with the key failed and the policy
	// records that failure (OnFailureCache or OnFailureConflict).
	ErrPreviousFailure = errors.New("idem: the first request with this key failed")
	// ErrLeaseLost: this call's hold on the key was taken over (its lease
	// expired) or the record was removed; its outcome was not stored.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrLeaseExpired is the cause of an operation's context when its
	// holder counted its own lease over (its renewals did not get through
	// in time) and gave it up, before any other client could judge it
	// over. It matches ErrLeaseLost.
	ErrLeaseExpired error = leaseExpired{}
	// ErrStoreUnavailable: the store failed; nothing was run (unless the
	// policy is OnStoreErrorFailOpen). A reservation the store applied
	// but whose answer was lost is freed in the background once the store
	// answers again, so that a retry runs.
	ErrStoreUnavailable = errors.New("idem: store unavailable")
	// ErrNotExecuted is for operations to return (wrapped) when they failed
	// before doing anything, such as a proxy that could not reach its
	// upstream: the key is released whatever Policy.OnFailure says, so a
	// retry runs.
	ErrNotExecuted = errors.New("idem: the operation did not run")
	// ErrOutcomeUnknown is for operations to return (wrapped) when they
	// started work but cannot tell whether it took effect: the request left
	// and no complete answer came back (an upstream timeout, a connection
	// reset, a body cut halfway). A panic in the operation counts as the
	// same. The key is never released for it under the default
	// OnUnknownConflict: retries get a *ConflictError of type
	// ConflictOutcomeUnknown, which matches ErrOutcomeUnknown, until the
	// record expires or an operator calls Engine.Release (HTTP 409).
	ErrOutcomeUnknown = errors.New("idem: the operation started and its outcome is unknown")
)

// KeyError explains why a key is invalid. It matches ErrInvalidKey.
type KeyError struct {
	// Reason completes "key ...": "is empty", "is longer than 255 bytes".
	Reason string
}

func (e *KeyError) Error() string { return "idem: invalid idempotency key: key " + e.Reason }

// Is reports whether target is ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// ConflictType names why a key could not be used; HTTP layers report it as
// the problem's conflict_type member.
type ConflictType string

// The conflict types.
const (
	ConflictInProgress      ConflictType = "in_progress"
	ConflictPayloadMismatch ConflictType = "payload_mismatch"
	ConflictKeyReused       ConflictType = "key_reused"
	ConflictPreviousFailure ConflictType = "previous_failure"
	// ConflictOutcomeUnknown: the first call started the operation and
	// ended without knowing whether it took effect (ErrOutcomeUnknown).
	ConflictOutcomeUnknown ConflictType = "outcome_unknown"
)

// ConflictError is returned when an existing record prevents the call from
// running. It matches the sentinel of its Type: ErrInProgress,
// ErrFingerprintMismatch, ErrKeyReused, ErrPreviousFailure or
// ErrOutcomeUnknown.
type ConflictError struct {
	// Type says why the key could not be used.
	Type ConflictType
	// Scope and Key are the call's, the key trimmed.
	Scope string
	Key   string
	// Record is the record that caused the conflict; its RequestID names
	// the first request. For ConflictPreviousFailure and
	// ConflictOutcomeUnknown its Value holds the stored failure.
	Record Record
	// Stale is set for ConflictInProgress when the holder's lease is over
	// and the policy is OnStaleConflict.
	Stale bool
	// redact prints the key in Error: the engine's Redactor, or the zero
	// one for an error built elsewhere. Error texts are logged, and a raw
	// key must not be (docs/ISOLATION.md).
	redact Redactor
}

func (e *ConflictError) Error() string {
	var what string
	switch e.Type {
	case ConflictInProgress:
		what = ErrInProgress.Error()
		if e.Stale {
			what += " (its holder stopped renewing its lease)"
		}
	case ConflictPayloadMismatch:
		what = ErrFingerprintMismatch.Error()
	case ConflictKeyReused:
		what = fmt.Sprintf("%s (bound to %q)", ErrKeyReused, e.Record.Binding)
	case ConflictPreviousFailure:
		what = ErrPreviousFailure.Error()
	case ConflictOutcomeUnknown:
		what = ErrOutcomeUnknown.Error()
		if e.Record.RequestID != "" {
			what += fmt.Sprintf(" (first request %q)", e.Record.RequestID)
		}
	default:
		what = "idem: conflict " + string(e.Type)
	}
	return fmt.Sprintf("%s: key_hash %s", what, e.redact.Key(e.Scope, e.Key))
}

// Is matches the sentinel of e.Type.
func (e *ConflictError) Is(target error) bool {
	switch e.Type {
	case ConflictInProgress:
		return target == ErrInProgress
	case ConflictPayloadMismatch:
		return target == ErrFingerprintMismatch
	case ConflictKeyReused:
		return target == ErrKeyReused
	case ConflictPreviousFailure:
		return target == ErrPreviousFailure
	case ConflictOutcomeUnknown:
		return target == ErrOutcomeUnknown
	}
	return false
}

// RetryAfter says when a caller that got this conflict should come back.
// For ConflictInProgress it is as long as the holder has been running so
// far (an operation that took 2 s so far is likely to take about as long
// again, so the waits grow as a backoff would), at least 1 s, and never
// past the end of the holder's lease: by then the caller finds the
// key free, completed or stale. Always the rest of the lease would tell a
// caller to wait out a whole lease (a minute by default) for an operation
// that ends in a second, since a live holder keeps renewing it. Rounded up
// to whole seconds. For every other type it is 0: retrying does not change
// the answer.
func (e *ConflictError) RetryAfter() time.Duration {
	if e.Type != ConflictInProgress {
		return 0
	}
	// Both on the store's clock: when it read the record, and the lease
	// left as it judged it.
	d := e.Record.ReadAt.Sub(e.Record.CreatedAt)
	if left := e.Record.LeaseLeft; d > left {
		d = left
	}
	if d <= time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// StoreError wraps a failure of the store. It matches ErrStoreUnavailable
// and unwraps to the store's error.
type StoreError struct {
	// Op is the store operation that failed: "reserve", "get",
	// "complete", "release", "cleanup".
	Op string
	// Err is the store's error.
	Err error
}

func (e *StoreError) Error() string { return "idem: store " + e.Op + ": " + e.Err.Error() }

// Is reports whether target is ErrStoreUnavailable.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Failure lets an operation choose what is stored when it fails: return
// &Failure{Value: v, Err: err} (or an error wrapping one) and, under
// OnFailureCache or OnFailureConflict, v is stored as the record's value
// instead of err's message. HTTP middleware uses it to keep the failed
// response.
type Failure struct {
	// Value is stored as the failed record's value.
	Value []byte
	// Err is the operation's error, returned by Do.
	Err error
}

func (f *Failure) Error() string {
	if f.Err == nil {
		return "idem: operation failed"
	}
	return f.Err.Error()
}

// Unwrap returns the underlying error.
func (f *Failure) Unwrap() error { return f.Err }

type leaseExpired struct{}

func (leaseExpired) Error() string {
	return "idem: lease given up by its holder: no renewal got through in time"
}

// Is makes ErrLeaseExpired match ErrLeaseLost.
func (leaseExpired) Is(target error) bool { return target == ErrLeaseLost }
