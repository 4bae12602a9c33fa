package idemhttp

import (
	"testing"
	"time"
)

// BenchmarkLimiter is what the cap adds to a keyed request that creates no
// record (a replay): admit and done, one tenant, under the lock.
func BenchmarkLimiter(b *testing.B) {
	l := newLimiter(10_000, 0, 256<<20, time.Now)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ok, _ := l.admit("alice"); !ok {
				b.Fatal("refused")
			}
			l.done("alice", false, 0, time.Hour)
		}
	})
}

// The limiter forgets a tenant once its records expired and a minute
// passed, so that tenants who never come back cost nothing; Retry-After is
// when the earliest record expires.
func TestLimiterForgets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newLimiter(2, 0, 0, func() time.Time { return now })
	for i := range 2 {
		if ok, _ := l.admit("t"); !ok {
			t.Fatal("refused under the cap")
		}
		l.done("t", true, 10, time.Duration(i+1)*time.Hour)
	}
	// The earliest record counts until the end of its expiry's minute.
	if ok, after := l.admit("t"); ok || after <= time.Hour || after > time.Hour+bucketWidth {
		t.Fatalf("at the cap: admitted %v, Retry-After %v; want refused, 1h and under a minute", ok, after)
	}
	now = now.Add(2*time.Hour + time.Minute)
	l.admit("other") // sweeps
	l.done("other", false, 0, 0)
	l.mu.Lock()
	_, kept := l.tenants["t"]
	buckets := l.buckets
	l.mu.Unlock()
	if kept || buckets != 0 {
		t.Errorf("after every record expired: tenant kept %v, %d buckets held", kept, buckets)
	}
}
