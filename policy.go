package idem

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of a Policy's zero fields.
const (
	DefaultTTL             = 24 * time.Hour
	DefaultLease           = 60 * time.Second
	DefaultCleanupInterval = 300 * time.Second
)

// OnFailure says what happens to a key whose first call failed. Its zero
// value is unset: OnFailureRelease, unless a base policy it is laid over
// says otherwise (Overlay).
type OnFailure int

const (
	// OnFailureRelease removes the record: a retry runs the operation again.
	// The default, as in Stripe's API for errors before execution, the IETF
	// draft, and AWS Powertools.
	OnFailureRelease OnFailure = iota + 1
	// OnFailureCache records the failure: retries get it back, replayed.
	OnFailureCache
	// OnFailureConflict records the failure: retries get a conflict with the
	// failure attached (an HTTP 409 that reports the previous failure).
	OnFailureConflict
)

// OnStale says what happens to an in_progress record whose holder stopped
// renewing its lease (it crashed or was killed). Its zero value is unset:
// OnStaleRetry, unless a base policy says otherwise.
type OnStale int

const (
	// OnStaleRetry lets the next call with the same request take the key
	// over and run the operation again. This is the one place where idem is
	// at-least-once rather than at-most-once: the dead holder may have done
	// part or all of the work. The default, since a key blocked forever is
	// what users of crashed workers complain about most.
	OnStaleRetry OnStale = iota + 1
	// OnStaleConflict keeps answering ErrInProgress until the record expires.
	OnStaleConflict
)

// OnStoreError says what happens when the store cannot be reached. Its
// zero value is unset: OnStoreErrorFailClosed, unless a base policy says
// otherwise.
type OnStoreError int

const (
	// OnStoreErrorFailClosed returns the error and runs nothing (HTTP 503).
	OnStoreErrorFailClosed OnStoreError = iota + 1
	// OnStoreErrorFailOpen runs the operation without protection; the
	// result is marked Unprotected so it can be logged and counted.
	OnStoreErrorFailOpen
)

// OnUnknown says what happens to a key whose first call started the
// operation and ended without knowing whether it took effect (its Func
// returned an error wrapping ErrOutcomeUnknown, or panicked). Its zero
// value is unset: OnUnknownConflict, unless a base policy says otherwise.
type OnUnknown int

const (
	// OnUnknownConflict leaves the key failed with conflict type
	// outcome_unknown: retries get ErrOutcomeUnknown (HTTP 409, naming the
	// first request) until the record expires or an operator releases it
	// with Engine.Release. The default: an operation whose answer was
	// lost must not run twice because a client retried.
	OnUnknownConflict OnUnknown = iota + 1
	// OnUnknownRelease releases the key: a retry runs the operation again.
	// At-least-once on purpose, for operations that are safe to repeat.
	OnUnknownRelease
)

// NoWait is a Wait that answers ErrInProgress at once, as the zero Wait
// does, but that says so: laid over a base policy that waits (Overlay), it
// stops the wait, where the zero Wait keeps the base's. Any other negative
// Wait is invalid.
const NoWait time.Duration = -1

// Policy holds the knobs of one kind of call. The zero value is the default
// policy; New applies WithDefaults.
//
// Every field's zero value means "unset": the default, or, when the policy
// is laid over a base (Overlay: a profile's over the engine's, a route's
// over its profile's), the base's value. A field that must say "the
// default" over a base that chose otherwise names it: OnFailureRelease,
// OnStaleRetry, OnStoreErrorFailClosed, OnUnknownConflict, NoWait. That
// is the one merge rule of policies, wherever they are combined.
type Policy struct {
	// TTL is how long a record lives after it was last written. 0 means
	// DefaultTTL (24 h).
	TTL time.Duration
	// Lease is how long a holder may run without renewing before its record
	// is stale. The engine renews it every Lease/3 while the operation runs.
	// 0 means DefaultLease (60 s).
	Lease time.Duration
	// MaxKeyBytes bounds the trimmed key. 0 means DefaultMaxKeyBytes (255).
	MaxKeyBytes int
	// OnFailure: release (the default, for the zero value), cache or
	// conflict.
	OnFailure OnFailure
	// OnStale: retry (the default, for the zero value) or conflict.
	OnStale OnStale
	// OnStoreError: fail closed (the default, for the zero value) or open.
	OnStoreError OnStoreError
	// OnUnknown: conflict (the default, for the zero value) or release,
	// for calls whose outcome is unknown (ErrOutcomeUnknown, or a panic in
	// the operation).
	OnUnknown OnUnknown
	// Wait is how long a call waits for a running call with the same key
	// to finish, and then replays its outcome. 0 (the default) answers
	// ErrInProgress at once, as Stripe's API does; so does NoWait, which
	// also overrides a base policy's wait. Waiters are woken
	// when the holder ends (see WithWaitPolling); an engine whose policy
	// waits also announces the end of its calls through the store's
	// Notifier, a round trip that policies without Wait do not pay, so
	// give every replica of a route the same Wait.
	Wait time.Duration
	// CleanupInterval throttles background cleanup of expired records to
	// once per interval per store. 0 means 300 s; negative
	// disables it (run `idem cleanup` from a scheduler instead).
	CleanupInterval time.Duration
}

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	if p.TTL == 0 {
		p.TTL = DefaultTTL
	}
	if p.Lease == 0 {
		p.Lease = DefaultLease
	}
	if p.MaxKeyBytes == 0 {
		p.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if p.CleanupInterval == 0 {
		p.CleanupInterval = DefaultCleanupInterval
	}
	if p.OnFailure == 0 {
		p.OnFailure = OnFailureRelease
	}
	if p.OnStale == 0 {
		p.OnStale = OnStaleRetry
	}
	if p.OnStoreError == 0 {
		p.OnStoreError = OnStoreErrorFailClosed
	}
	if p.OnUnknown == 0 {
		p.OnUnknown = OnUnknownConflict
	}
	if p.Wait == NoWait {
		p.Wait = 0
	}
	return p
}

// Overlay returns p with the fields that over sets (its non-zero fields)
// laid over it: how a profile refines the engine's policy and a route its
// profile's, the one rule by which policies combine. A zero field of over
// keeps p's; to set the default over a base that chose otherwise, over
// names it (OnFailureRelease, NoWait: see Policy).
func (p Policy) Overlay(over Policy) Policy {
	if over.TTL != 0 {
		p.TTL = over.TTL
	}
	if over.Lease != 0 {
		p.Lease = over.Lease
	}
	if over.MaxKeyBytes != 0 {
		p.MaxKeyBytes = over.MaxKeyBytes
	}
	if over.OnFailure != 0 {
		p.OnFailure = over.OnFailure
	}
	if over.OnStale != 0 {
		p.OnStale = over.OnStale
	}
	if over.OnStoreError != 0 {
		p.OnStoreError = over.OnStoreError
	}
	if over.OnUnknown != 0 {
		p.OnUnknown = over.OnUnknown
	}
	if over.Wait != 0 {
		p.Wait = over.Wait
	}
	if over.CleanupInterval != 0 {
		p.CleanupInterval = over.CleanupInterval
	}
	return p
}

// Validate reports the first invalid field of p, by name. Unset fields are
// valid: it checks p as written, before or after WithDefaults.
func (p Policy) Validate() error {
	if p.Wait < 0 && p.Wait != NoWait {
		return errors.New("idem: policy: Wait is negative (NoWait says no wait)")
	}
	p = p.WithDefaults()
	switch {
	case p.TTL < 0:
		return errors.New("idem: policy: TTL is negative")
	case p.Lease < 0:
		return errors.New("idem: policy: Lease is negative")
	case p.TTL > 0 && p.Lease > p.TTL:
		return fmt.Errorf("idem: policy: Lease %v is longer than TTL %v", p.Lease, p.TTL)
	case p.Lease > 0 && p.Lease < 10*time.Millisecond:
		return fmt.Errorf("idem: policy: Lease %v is too short to renew", p.Lease)
	case p.MaxKeyBytes < 0:
		return errors.New("idem: policy: MaxKeyBytes is negative")
	case p.OnFailure < OnFailureRelease || p.OnFailure > OnFailureConflict:
		return fmt.Errorf("idem: policy: unknown OnFailure %d", p.OnFailure)
	case p.OnStale < OnStaleRetry || p.OnStale > OnStaleConflict:
		return fmt.Errorf("idem: policy: unknown OnStale %d", p.OnStale)
	case p.OnStoreError < OnStoreErrorFailClosed || p.OnStoreError > OnStoreErrorFailOpen:
		return fmt.Errorf("idem: policy: unknown OnStoreError %d", p.OnStoreError)
	case p.OnUnknown < OnUnknownConflict || p.OnUnknown > OnUnknownRelease:
		return fmt.Errorf("idem: policy: unknown OnUnknown %d", p.OnUnknown)
	}
	return nil
}

// String forms, used by logs and by the gateway's configuration file
// (on_failure: cache).

func (o OnFailure) String() string {
	switch o {
	case OnFailureRelease:
		return "release"
	case OnFailureCache:
		return "cache"
	case OnFailureConflict:
		return "conflict"
	}
	return fmt.Sprintf("OnFailure(%d)", int(o))
}

func (o OnStale) String() string {
	switch o {
	case OnStaleRetry:
		return "retry"
	case OnStaleConflict:
		return "conflict"
	}
	return fmt.Sprintf("OnStale(%d)", int(o))
}

func (o OnStoreError) String() string {
	switch o {
	case OnStoreErrorFailClosed:
		return "fail_closed"
	case OnStoreErrorFailOpen:
		return "fail_open"
	}
	return fmt.Sprintf("OnStoreError(%d)", int(o))
}

func (o OnUnknown) String() string {
	switch o {
	case OnUnknownConflict:
		return "conflict"
	case OnUnknownRelease:
		return "release"
	}
	return fmt.Sprintf("OnUnknown(%d)", int(o))
}
