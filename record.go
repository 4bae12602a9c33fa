package idem

import (
	"time"

	"github.com/idem-dev/idem/store"
)

// Record is a key's record as a caller sees it: the state the key is in,
// its stored outcome, the request that first used it and its times. It
// leaves out what only the engine and the store use to fence holders (the
// reservation's token) and to tell requests apart (the fingerprint), so
// that nothing a caller reads can be used to write past the engine.
// Engine.Lookup and ConflictError return it; RecordOf makes one from a
// record read from a store directly.
type Record struct {
	// Scope and Key are the record's; Key is the client's raw key.
	Scope string
	Key   string
	// State is in_progress, succeeded or failed.
	State State
	// Value is the stored outcome when succeeded, or the failure stored when
	// failed, without the engine's own marks.
	Value []byte
	// OutcomeUnknown is set on a failed record whose operation started and
	// it is not known whether it took effect (ErrOutcomeUnknown, or a
	// panic): Value is the failure recorded for it.
	OutcomeUnknown bool
	// Binding is the action the key is bound to, if the call named one.
	Binding string
	// RequestID is the ID of the request that first reserved the key.
	RequestID string
	// CreatedAt, UpdatedAt and ExpiresAt are on the store's clock, as is
	// ReadAt, the instant the store read the record: compare them with
	// ReadAt, not with the reader's clock, which need not agree.
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	ReadAt    time.Time
	// LeaseUntil is when an in_progress record's lease ends, for display.
	LeaseUntil time.Time
	// LeaseLeft is how long an in_progress record's lease still ran when
	// the store read it, as the store judged it; at or below zero the
	// holder stopped renewing it (Stale).
	LeaseLeft time.Duration
}

// RecordOf returns the caller's view of r, a record read from a store
// directly (an operator's tool does); Engine.Lookup returns the same view.
func RecordOf(r store.Record) Record {
	failure, unknown := outcomeUnknown(r)
	if unknown {
		r.Value = failure
	}
	return Record{
		Scope: r.Scope, Key: r.Key, State: r.State, Value: r.Value, OutcomeUnknown: unknown,
		Binding: r.Binding, RequestID: r.RequestID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ExpiresAt: r.ExpiresAt, ReadAt: r.ReadAt,
		LeaseUntil: r.LeaseUntil, LeaseLeft: r.LeaseLeft,
	}
}

// Stale reports whether the record is in progress and its holder's lease
// is over: the holder likely died, and the next call may take the key
// over.
func (r Record) Stale() bool { return r.State == store.InProgress && r.LeaseLeft <= 0 }

// Releasable reports whether Engine.Release would free the key: its
// outcome is unknown, or its holder stopped renewing its lease (Stale).
// These are the keys an operator may release once someone has checked
// what became of the first call; any other record is ErrNotReleasable.
func (r Record) Releasable() bool { return r.OutcomeUnknown || r.Stale() }
