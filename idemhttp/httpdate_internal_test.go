package idemhttp

import (
	"net/http"
	"testing"
	"time"
)

// FuzzHTTPDate: the hand-written HTTP-date is time.Format's, byte for
// byte, at any instant and in any zone.
func FuzzHTTPDate(f *testing.F) {
	for _, s := range []int64{0, -1, 951782400, 1767225599, 253402300799, 253402300800, -62135596800, -62135596801} {
		f.Add(s, int64(0), int32(0))
	}
	f.Add(int64(1795910400), int64(999999999), int32(-12*3600))
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int32) {
		at := time.Unix(sec, nsec).In(time.FixedZone("z", int(offset)))
		if got, want := httpDate(at), at.UTC().Format(http.TimeFormat); got != want {
			t.Fatalf("httpDate(%v) = %q, want %q", at, got, want)
		}
	})
}

// TestExpiresDate: a route's first calls share the HTTP-date of their
// expiry's second, and a call whose expiry is in another second, later or
// earlier, or a fraction either side, gets its own.
func TestExpiresDate(t *testing.T) {
	var rt route
	at := time.Date(2026, 11, 28, 23, 5, 9, 0, time.UTC)
	for _, d := range []time.Duration{0, 999 * time.Millisecond, time.Second, 0, -time.Nanosecond, 24 * time.Hour, 500 * time.Millisecond} {
		x := at.Add(d).In(time.FixedZone("z", 3600))
		if got, want := rt.expiresDate(x), x.UTC().Format(http.TimeFormat); got != want {
			t.Fatalf("expiresDate(%v) = %q, want %q", x, got, want)
		}
	}
}

func BenchmarkHTTPDate(b *testing.B) {
	at := time.Date(2026, 11, 28, 23, 5, 9, 0, time.UTC)
	b.Run("idem", func(b *testing.B) {
		for b.Loop() {
			_ = httpDate(at)
		}
	})
	b.Run("format", func(b *testing.B) {
		for b.Loop() {
			_ = at.UTC().Format(http.TimeFormat)
		}
	})
}
