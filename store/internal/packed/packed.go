package packed

import (
	"math"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
)

// Record is a store.Record in 88 bytes and one string, with or without
// its value: a map can hold it (and a 32-byte key) in its own slots, which
// Go's maps do only for keys and values of at most 128 bytes; larger ones
// are allocated one by one. The zero Record is a record with every field
// empty.
type Record struct {
	// text holds KeyHash, Scope, Key, Fingerprint, Binding, RequestID and
	// the value (if packed with it) one after another; ends[i] is where
	// the i-th ends, the value at len(text).
	text  string
	ends  [6]uint32
	state uint8 // index in states
	Token uint64
	// Times in Unix nanoseconds (NoTime: the zero time), clamped to the
	// years 1678-2262 that an int64 of nanoseconds covers.
	created, updated, expires, lease int64
}

var states = [...]store.State{"", store.InProgress, store.Succeeded, store.Failed}

// NoTime is the zero time in Unix nanoseconds.
const NoTime = math.MinInt64

// Nanos returns t in Unix nanoseconds, clamped to the years 1678-2262
// that an int64 covers; the zero time is NoTime.
func Nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return NoTime
	case t.Before(minTime):
		return NoTime + 1
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minTime, maxTime = time.Unix(0, NoTime+1), time.Unix(0, math.MaxInt64)

// FromNanos is the time of n Unix nanoseconds (NoTime: the zero time).
func FromNanos(n int64) time.Time {
	if n == NoTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Pack packs r, but for its Value.
func Pack(r *store.Record) Record { return pack(r, nil) }

// PackWithValue packs r with its Value (Value returns it back): the
// record and its outcome in one object.
func PackWithValue(r *store.Record) Record { return pack(r, r.Value) }

func pack(r *store.Record, value []byte) Record {
	parts := [6]string{r.KeyHash, r.Scope, r.Key, r.Fingerprint, r.Binding, r.RequestID}
	n := len(value)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder // its String copies nothing: one allocation
	b.Grow(n)
	p := Record{Token: r.Token,
		created: Nanos(r.CreatedAt), updated: Nanos(r.UpdatedAt),
		expires: Nanos(r.ExpiresAt), lease: Nanos(r.LeaseUntil)}
	p.SetState(r.State)
	for i, s := range parts {
		b.WriteString(s)
		p.ends[i] = uint32(b.Len())
	}
	b.Write(value)
	p.text = b.String()
	return p
}

// Value returns a copy of the value the record was packed with, nil if
// none or empty.
func (p *Record) Value() []byte {
	v := p.text[p.ends[5]:]
	if v == "" {
		return nil
	}
	return []byte(v)
}

// WithValue returns the record with its value replaced by v.
func (p Record) WithValue(v []byte) Record {
	n := p.ends[5]
	var b strings.Builder
	b.Grow(int(n) + len(v))
	b.WriteString(p.text[:n])
	b.Write(v)
	p.text = b.String()
	return p
}

func (p *Record) part(i int) string {
	from := uint32(0)
	if i > 0 {
		from = p.ends[i-1]
	}
	return p.text[from:p.ends[i]]
}

// Unpack returns the record with a nil Value (see Value); its strings
// share p's.
func (p *Record) Unpack() store.Record {
	return store.Record{
		KeyHash: p.part(0), Scope: p.part(1), Key: p.part(2), Fingerprint: p.part(3),
		Binding: p.part(4), RequestID: p.part(5),
		State: p.State(), Token: p.Token,
		CreatedAt: FromNanos(p.created), UpdatedAt: FromNanos(p.updated),
		ExpiresAt: FromNanos(p.expires), LeaseUntil: FromNanos(p.lease),
	}
}

// State returns the record's state.
func (p *Record) State() store.State { return states[p.state] }

// SetState sets the record's state; a state that is not one of the
// store's reads back as empty (records are checked before they are
// packed).
func (p *Record) SetState(st store.State) {
	p.state = 0
	for i, s := range states {
		if s == st {
			p.state = uint8(i)
		}
	}
}

// KeyHash returns the record's key hash.
func (p *Record) KeyHash() string { return p.part(0) }

// Fingerprint returns the record's fingerprint.
func (p *Record) Fingerprint() string { return p.part(3) }

// Binding returns the record's binding.
func (p *Record) Binding() string { return p.part(4) }

// ExpiresAt returns when the record expires.
func (p *Record) ExpiresAt() time.Time { return FromNanos(p.expires) }

// Expired reports whether the record no longer exists at now.
func (p *Record) Expired(now time.Time) bool { return Nanos(now) >= p.expires }

// Stale reports whether the record is in_progress and its holder's lease
// is over at now.
func (p *Record) Stale(now time.Time) bool {
	return p.State() == store.InProgress && Nanos(now) >= p.lease
}

// ReadAt returns the record as read at now (store.Record.SetReadAt), with
// a nil Value.
func (p *Record) ReadAt(now time.Time) store.Record {
	r := p.Unpack()
	r.SetReadAt(now)
	return r
}

// ExpiresSameAs reports whether the record expires at t exactly.
func (p *Record) ExpiresSameAs(t time.Time) bool { return p.expires == Nanos(t) }

// SetLeaseUntil sets when the holder's lease ends.
func (p *Record) SetLeaseUntil(t time.Time) { p.lease = Nanos(t) }

// Complete sets what a completion changes: state, update and expiry times.
func (p *Record) Complete(state store.State, now, expiresAt time.Time) {
	p.SetState(state)
	p.updated, p.expires = Nanos(now), Nanos(expiresAt)
}
