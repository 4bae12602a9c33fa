package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
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
	// ErrNoSpace: the store cannot write for want of space (its disk is
	// full). Reads still work; retry the write later.
	ErrNoSpace = errors.New("store: no space left to write")
	// ErrForeignRecord: the record found under a call's identity holds
	// another scope or key (it was planted, or is damaged). Nothing of it
	// is replayed; callers treat it as a store failure.
	ErrForeignRecord = errors.New("store: the record found belongs to another scope or key")
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

// HashKey returns the identity of the record of key in scope: the hex
// SHA-256 of the scope with '%' and ':' escaped ("%25", "%3A"), a ':', and
// the key. The escaped scope holds no ':', so the first ':' ends it and no
// two different (scope, key) pairs share an identity: scope "alice" with
// key "x:y" and scope "alice:x" with key "y" are two records. Stores index
// records by it, never by the raw key, so that key length and content
// never reach an index.
//
// A scope with neither character is hashed exactly as LegacyHashKey
// hashes it, so the records of such scopes kept their identity across the
// change that introduced the escape.
func HashKey(scope, key string) string {
	if !strings.ContainsAny(scope, "%:") {
		return LegacyHashKey(scope, key)
	}
	// Escaped on the stack when scope and key fit, as LegacyHashKey does.
	var buf [256]byte
	n := 0
	for i := 0; i < len(scope) && n >= 0; i++ {
		switch c := scope[i]; {
		case n+3 > len(buf):
			n = -1
		case c == '%':
			n += copy(buf[n:], "%25")
		case c == ':':
			n += copy(buf[n:], "%3A")
		default:
			buf[n] = c
			n++
		}
	}
	if n >= 0 && n+1+len(key) <= len(buf) {
		buf[n] = ':'
		n++
		n += copy(buf[n:], key)
		return hexSum(sha256.Sum256(buf[:n]))
	}
	h := sha256.New()
	h.Write([]byte(scopeEscaper.Replace(scope)))
	h.Write([]byte{':'})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return hexSum(sum)
}

var scopeEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// LegacyHashKey returns the hex SHA-256 of scope + ":" + key, the identity
// of records before HashKey escaped the scope. It is ambiguous (scope
// "alice" with key "x:y" shares it with scope "alice:x" with key "y"), so
// it names no new record: the engine reads it only to find records
// written before the change (idem.WithLegacyReads), and replays what it
// finds there only to the call whose scope and key the record holds.
func LegacyHashKey(scope, key string) string {
	// Most keys fit a buffer on the stack: hashed in one call, the hex
	// string is the only allocation.
	if n := len(scope) + 1 + len(key); n <= 256 {
		var buf [256]byte
		copy(buf[copy(buf[:], scope)+1:], key)
		buf[len(scope)] = ':'
		return hexSum(sha256.Sum256(buf[:n]))
	}
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{':'})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return hexSum(sum)
}

func hexSum(sum [sha256.Size]byte) string {
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:]) // the only allocation
}

// KeyHasher is an optional capability of a Store whose own layout keeps
// scopes apart (S3's folder per scope), so that a hash of scope and key
// need not frame them: the engine names the store's records by its
// HashKey instead of the package's. S3 keeps seed 004's object names,
// idempotency/{scope}/{sha256(scope:key)}.json, with it.
type KeyHasher interface {
	HashKey(scope, key string) string
}

// KeyHasherOf returns s's KeyHasher: s itself, or the KeyHasher of the
// store it wraps, found through an Unwrap() Store method (as NotifierOf
// does). A wrapper that renames records (seal's) keeps the wrapped store's
// separation of scopes, so the capability passes through it.
func KeyHasherOf(s Store) (KeyHasher, bool) {
	for s != nil {
		if h, ok := s.(KeyHasher); ok {
			return h, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return nil, false
		}
		s = u.Unwrap()
	}
	return nil, false
}

// Record is what a store keeps per key.
//
// Its times are read off the store's own clock, never the caller's: the
// database server's for PostgreSQL, Redis's TIME, the S3 server's Date,
// the process's monotonic clock for the embedded stores. Callers compare
// them only with ReadAt, which is on the same clock.
type Record struct {
	// KeyHash is HashKey(Scope, Key) (or the store's own KeyHasher's):
	// the record's identity, 64 lowercase hex digits. Stores may reject any
	// other form.
	KeyHash string
	// Scope is the namespace the key lives in (tenant, endpoint, task type).
	Scope string
	// Key is the client's raw key, never part of an index. Stores return
	// Scope and Key as written: the engine replays a record, or answers a
	// conflict with it, only to the call whose scope and key it holds.
	Key string
	// Fingerprint identifies the request the key was first used with.
	Fingerprint string
	// Binding is the action/target the key is bound to (an admin API's
	// "cancel_workflow wf-42"); a key reused for another binding is a
	// conflict.
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
	// ExpiresAt is when the record stops existing for every reader, on the
	// store's clock.
	ExpiresAt time.Time
	// LeaseUntil is when an in_progress record's lease ends on the store's
	// clock, for display. Stores without a clock of their own (S3) set it
	// from ReadAt and LeaseLeft. Whether the lease is over is LeaseLeft's
	// to say, not a comparison of LeaseUntil with some other clock.
	LeaseUntil time.Time

	// ReadAt is the store's clock when it read the record: the instant the
	// times above are to be compared with. Set by every read.
	ReadAt time.Time
	// LeaseLeft is, for an in_progress record, how long its holder's lease
	// still runs as the store judged it when it read the record: on its
	// own clock, or, for a store without one, from how long this client
	// has watched the record unchanged (see the package doc). Zero or less
	// means the lease is over: the record is stale.
	LeaseLeft time.Duration
}

// Stale reports whether r is in_progress and its holder's lease is over,
// as the store judged when it read r.
func (r *Record) Stale() bool {
	return r.State == InProgress && r.LeaseLeft <= 0
}

// SetReadAt sets ReadAt to now and LeaseLeft from LeaseUntil, for stores
// that judge leases on their own clock and read the record at now on it.
func (r *Record) SetReadAt(now time.Time) {
	r.ReadAt, r.LeaseLeft = now, 0
	if r.State == InProgress {
		r.LeaseLeft = r.LeaseUntil.Sub(now)
	}
}

// ExpiresIn is how long r still exists after it was read.
func (r *Record) ExpiresIn() time.Duration { return r.ExpiresAt.Sub(r.ReadAt) }

// Fence names the record held by one reservation.
type Fence struct {
	KeyHash string
	Scope   string
	Token   uint64
}

// ReserveRequest asks to hold a key.
type ReserveRequest struct {
	// Record is the record to create: KeyHash, Scope, Key, Fingerprint,
	// Binding, Token and RequestID are set; State is in_progress and
	// Value is nil. Its times are the store's to set from its own clock:
	// CreatedAt and UpdatedAt to now, ExpiresAt to now + TTL, LeaseUntil
	// to now + Lease.
	Record Record
	// Lease is how long the reservation holds the key without a renewal.
	Lease time.Duration
	// TTL is how long the record exists from now.
	TTL time.Duration
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
	// is false, with ReadAt and LeaseLeft set. It is not set when Acquired
	// is true.
	Existing Record
}

// Completion ends a reservation with an outcome.
type Completion struct {
	Fence
	// State is Succeeded or Failed.
	State State
	Value []byte
	// TTL is how long the record exists from now (the store's now, which
	// also becomes its UpdatedAt).
	TTL time.Duration
}

// Store keeps idempotency records. Implementations must be safe for
// concurrent use, and every method must be atomic with respect to every other
// client of the same backend, including other processes.
//
// Leases and expiry are judged on one clock, never by comparing two
// machines' clocks: the store's own where it has one, and where it has
// none, by the observe-and-wait rule of the package doc. Callers send
// durations, not instants.
//
// Every method returns the context's error (possibly wrapped) when ctx is
// done before the work is done, and ErrClosed after Close. A call that
// fails with any other error may still have taken effect (its reply was
// lost); a retried Reserve then returns Acquired false with the caller's own
// token, and a retried Complete returns ErrLeaseLost. The engine recognises
// both by the token, so stores need not.
type Store interface {
	// Reserve creates req.Record if no live record exists for its KeyHash,
	// replacing an expired one; or, with req.TakeOverStale, replaces a
	// stale in_progress record whose Fingerprint and Binding equal the
	// request's. Otherwise it returns the existing record with Acquired
	// false. Of any number of concurrent callers for one key, at most one
	// acquires it.
	Reserve(ctx context.Context, req ReserveRequest) (Reservation, error)

	// Get returns the live record for keyHash, or ErrNotFound.
	Get(ctx context.Context, scope, keyHash string) (Record, error)

	// Renew extends the lease of the in_progress record held by f.Token to
	// lease from now. It returns ErrLeaseLost when f.Token does not hold it.
	Renew(ctx context.Context, f Fence, lease time.Duration) error

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

	// Cleanup deletes at most limit records (all when limit <= 0) that
	// have expired, and returns how many it deleted. Its cost grows with
	// the number of expired records, not with the live ones.
	Cleanup(ctx context.Context, limit int) (int, error)

	// Close releases the store's resources. Stores that were handed an
	// open client (a pool) do not close it.
	Close() error
}

// LegacyFree is an optional capability of a Store that can hold no record
// an earlier version of idem wrote: none under LegacyHashKey, none under a
// scope its callers had before (one that starts empty in every process, as
// the memory store does, or one whose format earlier versions cannot
// write). The engine then looks for no record there by default
// (idem.WithLegacyReads): a first call whose scope holds ':' or '%' makes
// one store read, not two.
type LegacyFree interface {
	HoldsNoLegacyRecords() bool
}

// HoldsNoLegacyRecords reports whether s, or the store it wraps (found
// through an Unwrap() Store method, as NotifierOf finds it), is LegacyFree
// and says so. A wrapper keeps the records of the store it wraps, so the
// capability passes through it.
func HoldsNoLegacyRecords(s Store) bool {
	for s != nil {
		if l, ok := s.(LegacyFree); ok {
			return l.HoldsNoLegacyRecords()
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return false
		}
		s = u.Unwrap()
	}
	return false
}
