package idemhttp

import (
	"container/heap"
	"sync"
	"time"
)

// maxTracked bounds the records the limiter remembers, all tenants
// together, so that its memory stays bounded (about 16 bytes a record, plus
// a map entry per tenant): past it, new records are not counted, and the
// caps are enforced again as tracked records expire.
const maxTracked = 1 << 20

// limiter counts, per tenant, the live records this process created (each
// until its TTL ends, even if it was released before: an upper bound) and
// the keyed calls it is running, so that one caller cannot fill the store
// and then deny every other tenant their new keys. It counts per process:
// gateways sharing a store each allow a tenant its cap (see
// Options.MaxKeysPerTenant).
type limiter struct {
	maxKeys  int   // per tenant
	maxAnon  int   // for the tenant ""
	maxBytes int64 // per tenant; 0: no bound
	now      func() time.Time

	mu        sync.Mutex
	tenants   map[string]*tenantCount // guarded by mu
	tracked   int                     // records in every tenantCount.live; guarded by mu
	lastSweep time.Time               // guarded by mu
}

// tenantCount is one tenant's live records and running calls.
type tenantCount struct {
	running int
	live    expiries
	bytes   int64 // of the records in live
}

type expiry struct {
	until time.Time
	bytes int64
}

// expiries is a min-heap by until.
type expiries []expiry

func (h expiries) Len() int           { return len(h) }
func (h expiries) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h expiries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiries) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiries) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newLimiter(maxKeys, maxAnon int, maxBytes int64, now func() time.Time) *limiter {
	if maxAnon == 0 {
		maxAnon = maxKeys
	}
	if maxKeys <= 0 && maxAnon <= 0 && maxBytes <= 0 {
		return nil
	}
	return &limiter{maxKeys: maxKeys, maxAnon: maxAnon, maxBytes: maxBytes, now: now, tenants: map[string]*tenantCount{}}
}

// prune drops t's expired records.
func (l *limiter) prune(t *tenantCount, now time.Time) {
	for len(t.live) > 0 && !t.live[0].until.After(now) {
		e := heap.Pop(&t.live).(expiry)
		t.bytes -= e.bytes
		l.tracked--
	}
}

// sweep forgets the tenants with nothing live, once a minute at most, so
// that tenants who do not come back cost nothing.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for name, t := range l.tenants {
		l.prune(t, now)
		if t.running == 0 && len(t.live) == 0 {
			delete(l.tenants, name)
		}
	}
}

// admit reports whether tenant may start a call that creates a record,
// and counts it as running until done; when it may not, it returns when
// its earliest counted record expires.
func (l *limiter) admit(tenant string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	t := l.tenants[tenant]
	if t == nil {
		t = &tenantCount{}
		l.tenants[tenant] = t
	}
	l.prune(t, now)
	max := l.maxKeys
	if tenant == "" {
		max = l.maxAnon
	}
	if (max > 0 && t.running+len(t.live) >= max) || (l.maxBytes > 0 && t.bytes >= l.maxBytes) {
		retryAfter = time.Second
		if len(t.live) > 0 {
			retryAfter = max1s(t.live[0].until.Sub(now))
		}
		return false, retryAfter
	}
	t.running++
	return true, 0
}

// done ends a call admit counted; created says it left a record of about
// bytes that lives for ttl.
// A tenant left with nothing is forgotten by sweep, not here: a tenant
// that comes back (every caller does) is not made again on each call.
func (l *limiter) done(tenant string, created bool, bytes int64, ttl time.Duration) {
	var until time.Time
	if created {
		until = l.now().Add(ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[tenant]
	if t == nil {
		return
	}
	t.running--
	if created && l.tracked < maxTracked {
		heap.Push(&t.live, expiry{until: until, bytes: bytes})
		t.bytes += bytes
		l.tracked++
	}
}

func max1s(d time.Duration) time.Duration {
	if d < time.Second {
		return time.Second
	}
	return d
}
