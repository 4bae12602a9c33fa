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
