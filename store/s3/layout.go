package s3store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
)

// Dir is the folder, under Options.Prefix, that holds every record (seed
// 004's idempotency/ next to its tasks/).
const Dir = "idempotency/"

// maxScopeSegment bounds the escaped scope in an object key. POSIX-backed
// servers map each "/"-separated segment to a file name, which most file
// systems cap at 255 bytes; longer segments are replaced by a hash.
const maxScopeSegment = 200

// ScopeSegment returns the folder name of scope under idempotency/.
//
// Letters, digits, '-', '_' and '.' stay as they are, so the seed's task
// types read as written ("charge_customer"). Every other byte, '/' and '%'
// included, is percent-encoded (%XX, upper case), so a scope never adds a
// folder level and never names "." or ".." (their dots are encoded too).
// That encoding is reversible, so two scopes never share a folder. Two
// forms no encoding produces, because '~' is always encoded, cover the
// rest: "~" for the empty scope, and "~" + the hex SHA-256 of the scope for
// a scope whose encoding is longer than 200 bytes (file systems behind
// S3-compatible servers cap a path segment at 255 bytes).
//
// The folder only groups records; the object's name, the key hash, already
// identifies (scope, key).
func ScopeSegment(scope string) string {
	if scope == "" {
		return "~"
	}
	var b strings.Builder
	const hexdig = "0123456789ABCDEF"
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexdig[c>>4])
			b.WriteByte(hexdig[c&15])
		}
	}
	seg := b.String()
	if strings.Trim(seg, ".") == "" { // "." or ".." (or more dots)
		seg = strings.ReplaceAll(seg, ".", "%2E")
	}
	if len(seg) > maxScopeSegment {
		sum := sha256.Sum256([]byte(scope))
		return "~" + hex.EncodeToString(sum[:])
	}
	return seg
}

// formatVersion is written into every object, so that a later format can
// tell the objects of this one apart. The durations (ttl, lease) were
// added to version 1 as optional fields rather than as a version 2, so
// that processes still running the code from before can read the objects
// of the new one while a deployment rolls (they judge them as before, by
// their own clocks, from the times written for display).
const formatVersion = 1

// legacyLease is the lease assumed for an in_progress object written
// before leases were stored whose lease_until is not after its
// updated_at: the engine's default lease.
const legacyLease = time.Minute

// object is a record as stored: JSON a person can read in the bucket. The token
// is a decimal string because JSON numbers are doubles to most readers and
// cannot hold every uint64; the value is base64 (encoding/json's []byte);
// durations are Go duration strings ("720h0m0s").
//
// The four times are for people and for processes of the version before
// durations were stored: the writer's estimate of the server's clock when
// it wrote (see serverClock). The store itself judges by ttl, ttl_from and
// lease against the server's answers (see stored).
type object struct {
	Version    int        `json:"version"`
	Key        string     `json:"key"`
	KeyHash    string     `json:"key_hash"` // "sha256:" + hex, naming the hash
	Scope      string     `json:"scope"`
	State      string     `json:"state"`
	Token      string     `json:"token"`
	InputHash  string     `json:"input_hash"` // the fingerprint
	Binding    string     `json:"binding,omitempty"`
	Value      []byte     `json:"value,omitempty"`
	RequestID  string     `json:"request_id,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LeaseUntil time.Time  `json:"lease_until"`
	TTL        string     `json:"ttl,omitempty"`
	TTLFrom    *time.Time `json:"ttl_from,omitempty"`
	Lease      string     `json:"lease,omitempty"`
	Renewal    uint64     `json:"renewal,omitempty"`
}

const keyHashPrefix = "sha256:"

// stored is a record as its object holds it: the record, with the times
// written for display, and what the store judges it by.
type stored struct {
	rec store.Record
	// ttl is how long the record lives from ttlFrom.
	ttl time.Duration
	// ttlFrom is the instant, on the server's clock, that ttl counts
	// from; zero means from this version's Last-Modified (the write
	// that set ttl). A renewal keeps the expiry of the reservation it
	// renews by naming its start here.
	ttlFrom time.Time
	// lease is the holder's lease, for in_progress records: how long a
	// would-be taker watches one version before it counts it stale.
	lease time.Duration
	// renewal counts the renewals of one reservation, so that each
	// renewal writes different bytes and thus gets a new ETag (the ETag
	// of a plain PUT is the MD5 of its body), which restarts every
	// watcher's count.
	renewal uint64
	// legacy: written by the code from before durations were stored;
	// ttl and lease were derived from its absolute times.
	legacy bool
}

// expiresAt is when the record stops existing, on the server's clock,
// for the version last modified at modified.
func (st *stored) expiresAt(modified time.Time) time.Time {
	base := st.ttlFrom
	if base.IsZero() {
		base = modified
	}
	return base.Add(st.ttl)
}

// base is the instant on the server's clock that the record's ttl counts
// from, for the version last modified at modified.
func (st *stored) base(modified time.Time) time.Time {
	if st.ttlFrom.IsZero() {
		return modified
	}
	return st.ttlFrom
}

// datePrecision is the resolution of the HTTP dates the expiry is judged
// by: Date and Last-Modified carry whole seconds. Both cut the fraction
// off (or round it), so a version written at 12:00:00.9 says 12:00:00 and
// a Date of 12:00:30 may be read at 12:00:30.9: a record is retained until
// the Date is a full second past its expiry, so that it is never treated
// as expired before it, and at most about a second after.
const datePrecision = time.Second

// expired reports whether the version of st with Last-Modified modified
// has expired at the server's Date date.
func (st *stored) expired(date, modified time.Time) bool {
	return !date.Before(st.expiresAt(modified).Add(datePrecision))
}

// encode returns the object body of st. The same record always encodes to
// the same bytes, which lets a writer recognise its own earlier write.
func encode(st *stored) ([]byte, error) {
	r := &st.rec
	o := object{
		Version:    formatVersion,
		Key:        r.Key,
		KeyHash:    keyHashPrefix + r.KeyHash,
		Scope:      r.Scope,
		State:      string(r.State),
		Token:      strconv.FormatUint(r.Token, 10),
		InputHash:  r.Fingerprint,
		Binding:    r.Binding,
		Value:      r.Value,
		RequestID:  r.RequestID,
		CreatedAt:  r.CreatedAt.UTC(),
		UpdatedAt:  r.UpdatedAt.UTC(),
		ExpiresAt:  r.ExpiresAt.UTC(),
		LeaseUntil: r.LeaseUntil.UTC(),
		TTL:        st.ttl.String(),
	}
	if !st.ttlFrom.IsZero() {
		from := st.ttlFrom.UTC()
		o.TTLFrom = &from
	}
	if r.State == store.InProgress {
		o.Lease = st.lease.String()
		o.Renewal = st.renewal
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keys and scopes read as written
	enc.SetIndent("", "  ")
	if err := enc.Encode(&o); err != nil {
		return nil, fmt.Errorf("s3store: encode record %s: %w", r.KeyHash, err)
	}
	return buf.Bytes(), nil
}

// decode parses an object body read under the name of keyHash. An object
// written before durations were stored (no ttl) gets them from its times,
// both written by one writer on one clock: the TTL is expires_at minus
// updated_at, counted from the object's Last-Modified (the write that set
// them: its creation, or its completion); the lease is lease_until minus
// updated_at, which overstates it for a renewed record (the taker waits
// longer, never shorter), or legacyLease when that is not positive.
func decode(keyHash string, body []byte) (stored, error) {
	var o object
	if err := json.Unmarshal(body, &o); err != nil {
		return stored{}, fmt.Errorf("s3store: record %s: %w", keyHash, err)
	}
	if o.Version != formatVersion {
		return stored{}, fmt.Errorf("s3store: record %s: format version %d, want %d", keyHash, o.Version, formatVersion)
	}
	if h := strings.TrimPrefix(o.KeyHash, keyHashPrefix); h != keyHash {
		// A record copied or renamed by hand would answer for another key.
		return stored{}, fmt.Errorf("s3store: record %s holds key hash %q", keyHash, o.KeyHash)
	}
	tok, err := strconv.ParseUint(o.Token, 10, 64)
	if err != nil {
		return stored{}, fmt.Errorf("s3store: record %s: token: %w", keyHash, err)
	}
	st := stored{
		rec: store.Record{
			KeyHash:     keyHash,
			Scope:       o.Scope,
			Key:         o.Key,
			Fingerprint: o.InputHash,
			Binding:     o.Binding,
			State:       store.State(o.State),
			Token:       tok,
			Value:       o.Value,
			RequestID:   o.RequestID,
			CreatedAt:   o.CreatedAt,
			UpdatedAt:   o.UpdatedAt,
			ExpiresAt:   o.ExpiresAt,
			LeaseUntil:  o.LeaseUntil,
		},
		renewal: o.Renewal,
	}
	if !st.rec.State.Valid() {
		return stored{}, fmt.Errorf("s3store: record %s: invalid state %q", keyHash, o.State)
	}
	if o.TTL == "" {
		st.legacy = true
		st.ttl = o.ExpiresAt.Sub(o.UpdatedAt)
		if st.lease = o.LeaseUntil.Sub(o.UpdatedAt); st.lease <= 0 {
			st.lease = legacyLease
		}
		return st, nil
	}
	if st.ttl, err = time.ParseDuration(o.TTL); err != nil {
		return stored{}, fmt.Errorf("s3store: record %s: ttl: %w", keyHash, err)
	}
	if o.TTLFrom != nil {
		st.ttlFrom = *o.TTLFrom
	}
	if st.rec.State == store.InProgress {
		if st.lease, err = time.ParseDuration(o.Lease); err != nil {
			return stored{}, fmt.Errorf("s3store: record %s: lease: %w", keyHash, err)
		}
	}
	return st, nil
}
