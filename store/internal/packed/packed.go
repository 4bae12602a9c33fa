package packed

import (
	"time"

	"github.com/idem-dev/idem/store"
)

// Record is a store.Record without its value. The zero Record is a record
// with every field empty.
type Record struct {
	// text holds KeyHash, Scope, Key, Fingerprint, Binding and RequestID
	// one after another; ends[i] is where the i-th ends.
	text  string
	ends  [6]uint32
	State store.State
	Token uint64
	// Times as seconds and nanoseconds since the Unix epoch: every time a
	// time.Time can hold, the zero time too, round-trips.
	created, updated, expires, lease stamp
}

type stamp struct {
	sec  int64
	nsec int32
}

func stampOf(t time.Time) stamp { return stamp{sec: t.Unix(), nsec: int32(t.Nanosecond())} }

func (s stamp) time() time.Time { return time.Unix(s.sec, int64(s.nsec)).UTC() }

// before reports whether s is before t.
func (s stamp) before(t stamp) bool { return s.sec < t.sec || s.sec == t.sec && s.nsec < t.nsec }

// Pack packs r, but for its Value.
func Pack(r *store.Record) Record {
	parts := [6]string{r.KeyHash, r.Scope, r.Key, r.Fingerprint, r.Binding, r.RequestID}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	p := Record{State: canonical(r.State), Token: r.Token,
		created: stampOf(r.CreatedAt), updated: stampOf(r.UpdatedAt),
		expires: stampOf(r.ExpiresAt), lease: stampOf(r.LeaseUntil)}
	for i, s := range parts {
		b = append(b, s...)
		p.ends[i] = uint32(len(b))
	}
	p.text = string(b)
	return p
}

func (p *Record) part(i int) string {
	from := uint32(0)
	if i > 0 {
		from = p.ends[i-1]
	}
	return p.text[from:p.ends[i]]
}

// Unpack returns the record with a nil Value; its strings share p's.
func (p *Record) Unpack() store.Record {
	return store.Record{
		KeyHash: p.part(0), Scope: p.part(1), Key: p.part(2), Fingerprint: p.part(3),
		Binding: p.part(4), RequestID: p.part(5),
		State: p.State, Token: p.Token,
		CreatedAt: p.created.time(), UpdatedAt: p.updated.time(),
		ExpiresAt: p.expires.time(), LeaseUntil: p.lease.time(),
	}
}

// KeyHash returns the record's key hash.
func (p *Record) KeyHash() string { return p.part(0) }

// Fingerprint returns the record's fingerprint.
func (p *Record) Fingerprint() string { return p.part(3) }

// Binding returns the record's binding.
func (p *Record) Binding() string { return p.part(4) }

// ExpiresAt returns when the record expires.
func (p *Record) ExpiresAt() time.Time { return p.expires.time() }

// Expired reports whether the record no longer exists at now, as
// store.Record.Expired does.
func (p *Record) Expired(now time.Time) bool { return !stampOf(now).before(p.expires) }

// Stale reports whether the record is in_progress and its holder's lease
// is over, as store.Record.Stale does.
func (p *Record) Stale(now time.Time) bool {
	return p.State == store.InProgress && !stampOf(now).before(p.lease)
}

// ExpiresSameAs reports whether the record expires at t exactly.
func (p *Record) ExpiresSameAs(t time.Time) bool { return p.expires == stampOf(t) }

// SetLeaseUntil sets when the holder's lease ends.
func (p *Record) SetLeaseUntil(t time.Time) { p.lease = stampOf(t) }

// Complete sets what a completion changes: state, update and expiry times.
func (p *Record) Complete(state store.State, now, expiresAt time.Time) {
	p.State, p.updated, p.expires = state, stampOf(now), stampOf(expiresAt)
}

// canonical returns the package constant equal to st, so that a state
// decoded from disk does not keep a string of its own alive.
func canonical(st store.State) store.State {
	for _, c := range [...]store.State{store.InProgress, store.Succeeded, store.Failed} {
		if st == c {
			return c
		}
	}
	return st
}
