package packed

import (
	"testing"
	"time"
	"unsafe"

	"github.com/idem-dev/idem/store"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, r := range []store.Record{
		{},
		{KeyHash: "kh", Scope: "sc", Key: "k", Fingerprint: "fp", Binding: "POST /x", RequestID: "req",
			State: store.Succeeded, Token: 42, Value: []byte("dropped"),
			CreatedAt: t0, UpdatedAt: t0.Add(time.Second), ExpiresAt: t0.Add(24 * time.Hour), LeaseUntil: t0.Add(time.Minute)},
		{Key: "only a key", State: store.Failed, ExpiresAt: time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		p := Pack(&r)
		got := p.Unpack()
		want := r
		want.Value = nil
		for _, tm := range []*time.Time{&want.CreatedAt, &want.UpdatedAt, &want.ExpiresAt, &want.LeaseUntil} {
			*tm = tm.UTC()
		}
		if !equal(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
		if expired(got, t0) != p.Expired(t0) || stale(got, t0) != p.Stale(t0) {
			t.Errorf("Expired/Stale differ from store.Record's for %+v", r)
		}
	}
}

func equal(a, b store.Record) bool {
	return a.KeyHash == b.KeyHash && a.Scope == b.Scope && a.Key == b.Key && a.Fingerprint == b.Fingerprint &&
		a.Binding == b.Binding && a.RequestID == b.RequestID && a.State == b.State && a.Token == b.Token &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.CreatedAt.IsZero() == b.CreatedAt.IsZero()
}

// expired and stale are the rules that store.Record's times mean: gone at
// ExpiresAt, stale at LeaseUntil (as SetReadAt then Stale judge it).
func expired(r store.Record, now time.Time) bool { return !now.Before(r.ExpiresAt) }

func stale(r store.Record, now time.Time) bool {
	r.SetReadAt(now)
	return r.Stale()
}

func readStale(p *Record, now time.Time) bool {
	r := p.ReadAt(now)
	return r.Stale()
}

// TestExpiryMatchesRecord checks Expired and Stale against store.Record's
// at the instants around the boundary.
func TestExpiryMatchesRecord(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 500)
	r := store.Record{State: store.InProgress, ExpiresAt: at, LeaseUntil: at}
	p := Pack(&r)
	for _, d := range []time.Duration{-time.Second, -1, 0, 1, time.Second} {
		now := at.Add(d)
		if p.Expired(now) != expired(r, now) || p.Stale(now) != stale(r, now) || readStale(&p, now) != stale(r, now) {
			t.Errorf("at %v: packed expired %v stale %v, record %v %v", d, p.Expired(now), p.Stale(now), expired(r, now), stale(r, now))
		}
	}
	p.Complete(store.Succeeded, at, at.Add(time.Hour))
	if p.Stale(at.Add(time.Hour)) || p.Expired(at) || !p.ExpiresSameAs(at.Add(time.Hour)) {
		t.Errorf("after Complete: %+v", p.Unpack())
	}
}

// TestClamped checks that times an int64 of nanoseconds cannot hold are
// clamped, keeping their order against every time it can.
func TestClamped(t *testing.T) {
	t.Parallel()
	r := store.Record{CreatedAt: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), ExpiresAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := Pack(&r)
	u := p.Unpack()
	if u.CreatedAt.IsZero() || u.CreatedAt.Year() != 1677 || u.ExpiresAt.Year() != 2262 {
		t.Fatalf("clamped to %v and %v", u.CreatedAt, u.ExpiresAt)
	}
	if p.Expired(time.Now()) || !p.Expired(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatal("a clamped expiry lost its order")
	}
}

// TestSize keeps a record and a value slice within the 128 bytes that Go's
// maps store in their slots.
func TestSize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(Record{}); n > 96 {
		t.Fatalf("a record is %d bytes, over 96 (and a 32-byte key beside it over 128)", n)
	}
}

func TestValue(t *testing.T) {
	t.Parallel()
	r := store.Record{KeyHash: "kh", Scope: "s", RequestID: "req", Value: []byte("outcome")}
	p := PackWithValue(&r)
	if string(p.Value()) != "outcome" || p.Unpack().RequestID != "req" || p.Unpack().Value != nil {
		t.Fatalf("packed with value: %q %+v", p.Value(), p.Unpack())
	}
	q := p.WithValue([]byte("other"))
	if string(q.Value()) != "other" || string(p.Value()) != "outcome" || q.Unpack().RequestID != "req" {
		t.Fatalf("WithValue: %q, original %q", q.Value(), p.Value())
	}
	if np := Pack(&r); np.Value() != nil {
		t.Fatalf("packed without value: %q", np.Value())
	}
	if e := p.WithValue(nil); e.Value() != nil {
		t.Fatalf("empty value reads %q, want nil", e.Value())
	}
}
