package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// Sentinel errors. Stores return them (possibly wrapped) so that callers can
// match them with errors.Is, whatever the backend.
var (
	// ErrNotFound: no record, or only an expired one, exists for the key.
	ErrNotFound = errors.New("store: record not found")
	// ErrLeaseLost: the caller's token no longer holds the record; it was
	// taken over, completed, released, expired or removed.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)

// State is the state of a record.
type State string

// The three states of a record.
const (
	InProgress State = "in_progress"
	Succeeded  State = "succeeded"
	Failed     State = "failed"
)

// Valid reports whether s is one of the three states.
func (s State) Valid() bool {
	return s == InProgress || s == Succeeded || s == Failed
}

// HashKey returns the hex SHA-256 of scope + ":" + key, the identity of a
// record (seed 004's key_hash). Stores index records by it, never by the raw
// key, so that key length and content never reach an index.
func HashKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{':'})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// Record is what a store keeps per key.
type Record struct {
	// KeyHash is HashKey(Scope, Key): the record's identity, 64 lowercase
	// hex digits. Stores may reject any other form.
	KeyHash string
	// Scope is the namespace the key lives in (tenant, endpoint, task type).
	Scope string
	// Key is the client's raw key, kept for inspection only; it is never
	// part of an index.
	Key string
	// Fingerprint identifies the request the key was first used with.
	Fingerprint string
	// Binding is the action/target the key is bound to (seed 000); a key
	// reused for another binding is a conflict.
	Binding string
	// State is in_progress, succeeded or failed.
	State State
	// Token fences the holder of an in_progress record. It is chosen by the
	// engine, unique per reservation.
	Token uint64
	// Value is the stored outcome when succeeded, or the failure when failed.
	// It is opaque to the store.
	Value []byte
	// RequestID is the ID of the request that first reserved the key.
	RequestID string
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt is when the record stops existing for every reader.
	ExpiresAt time.Time
	// LeaseUntil is when an in_progress record's holder is presumed dead.
	LeaseUntil time.Time
}

// Expired reports whether r no longer exists at now.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// Stale reports whether r is in_progress and its holder's lease is over.
func (r *Record) Stale(now time.Time) bool {
	return r.State == InProgress && !now.Before(r.LeaseUntil)
}

// Fence names the record held by one reservation.
type Fence struct {
	KeyHash string
	Scope   string
	Token   uint64
}

// ReserveRequest asks to hold a key.
type ReserveRequest struct {
	// Record is the record to create: KeyHash, Scope, Key, Fingerprint,
	// Binding, Token, RequestID, CreatedAt, UpdatedAt, ExpiresAt and
	// LeaseUntil are set; State is in_progress and Value is nil.
	Record Record
	// Now is the caller's clock, against which expiry and leases are judged.
	Now time.Time
	// TakeOverStale lets the request replace an in_progress record whose
	// lease is over, but only when Fingerprint and Binding are equal to the
	// stale record's: a stale holder never hands its key to another request.
	TakeOverStale bool
}

// Reservation is the answer to a ReserveRequest.
type Reservation struct {
	// Acquired: the request now holds the key with its token.
	Acquired bool
	// TookOver: Acquired by replacing a stale in_progress record.
	TookOver bool
	// Existing is the record that prevented the reservation when Acquired
	// is false. It is not set when Acquired is true.
	Existing Record
}

// Completion ends a reservation with an outcome.
type Completion struct {
	Fence
	// State is Succeeded or Failed.
	State State
	Value []byte
	// Now becomes the record's UpdatedAt.
	Now       time.Time
	ExpiresAt time.Time
}

// Store keeps idempotency records. Implementations must be safe for
// concurrent use, and every method must be atomic with respect to every other
// client of the same backend, including other processes.
//
// Every method returns the context's error (possibly wrapped) when ctx is
// done before the work is done, and ErrClosed after Close. A call that
// fails with any other error may still have taken effect (its reply was
// lost); a retried Reserve then returns Acquired false with the caller's own
// token, and a retried Complete returns ErrLeaseLost. The engine recognises
// both by the token, so stores need not.
type Store interface {
	// Reserve creates req.Record if no live record exists for its KeyHash
	// (a record is live at req.Now when not expired), replacing an expired
	// one; or, with req.TakeOverStale, replaces a stale in_progress record
	// whose Fingerprint and Binding equal the request's. Otherwise it
	// returns the existing record with Acquired false. Of any number of
	// concurrent callers for one key, at most one acquires it.
	Reserve(ctx context.Context, req ReserveRequest) (Reservation, error)

	// Get returns the live record for keyHash at now, or ErrNotFound.
	Get(ctx context.Context, scope, keyHash string, now time.Time) (Record, error)

	// Renew extends the lease of the in_progress record held by f.Token to
	// leaseUntil. It returns ErrLeaseLost when f.Token does not hold it.
	Renew(ctx context.Context, f Fence, leaseUntil time.Time) error

	// Complete moves the in_progress record held by c.Token to c.State
	// with c.Value. It returns ErrLeaseLost when c.Token does not hold it.
	Complete(ctx context.Context, c Completion) error

	// Release deletes the in_progress or failed record held by f.Token,
	// so that the key can be used again: the holder gives its key back, or
	// an operator frees a key that failed with an unknown outcome. A
	// succeeded record is never released: an outcome a client may have
	// seen stays until it expires. It returns ErrLeaseLost when f.Token
	// does not hold the record or the record succeeded.
	Release(ctx context.Context, f Fence) error

	// Cleanup deletes at most limit records (all when limit <= 0) whose
	// ExpiresAt is not after now, and returns how many it deleted. Its cost
	// grows with the number of expired records, not with the live ones.
	Cleanup(ctx context.Context, now time.Time, limit int) (int, error)

	// Close releases the store's resources. Stores that were handed an
	// open client (a pool) do not close it.
	Close() error
}
