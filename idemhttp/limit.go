package idemhttp

import (
	"container/heap"
	"sync"
	"time"
)

// bucketWidth is how finely the limiter tells expiries apart: a record is
// counted until the end of the bucket its expiry falls in (at most this
// much longer than it lives), so that a tenant costs one bucket per
// width of its records' expiries rather than one entry per record.
const bucketWidth = time.Minute

// maxBuckets bounds the buckets the limiter holds, all tenants together,
// so that its memory stays bounded (a few MiB) however many records and
// tenants there are: past it, new records are not counted until tracked
// ones expire.
const maxBuckets = 1 << 16

// limiter counts, per tenant, the live records this process created (each
// until its TTL ends, even if it was released before: an upper bound) and
// the keyed calls it is running, so that one caller cannot fill the store
// and then deny every other tenant their new keys. It counts per process:
// gateways sharing a store each allow a tenant its cap (see
// Options.MaxKeysPerTenant).
type limiter struct {
	maxKeys  int   // per tenant; <= 0: no bound
	maxAnon  int   // for the tenant ""; <= 0: no bound
	maxBytes int64 // per tenant; 0: no bound
	now      func() time.Time

	mu        sync.Mutex
	tenants   map[string]*tenantCount // guarded by mu
	buckets   int                     // in every tenantCount; guarded by mu
	lastSweep time.Time               // guarded by mu
}

// tenantCount is one tenant's live records and running calls.
type tenantCount struct {
	running int
	keys    int              // records in byEnd
	bytes   int64            // of the records in byEnd
	byEnd   map[int64]*count // by the unix second its records stop counting
	ends    endHeap          // byEnd's keys, earliest first
}

type count struct {
	keys  int
	bytes int64
}

// endHeap is a min-heap of bucket ends.
type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
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

// prune drops t's buckets that ended by now.
func (l *limiter) prune(t *tenantCount, now int64) {
	for len(t.ends) > 0 && t.ends[0] <= now {
		end := heap.Pop(&t.ends).(int64)
		c := t.byEnd[end]
		delete(t.byEnd, end)
		t.keys -= c.keys
		t.bytes -= c.bytes
		l.buckets--
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
		l.prune(t, now.Unix())
		if t.running == 0 && t.keys == 0 {
			delete(l.tenants, name)
		}
	}
}

// admit reports whether tenant may start a call that creates a record,
// and counts it as running until done; when it may not, it returns when
// its earliest counted record stops counting.
func (l *limiter) admit(tenant string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	t := l.tenants[tenant]
	if t == nil {
		t = &tenantCount{} // byEnd is made with its first record
		l.tenants[tenant] = t
	}
	l.prune(t, now.Unix())
	capKeys := l.maxKeys
	if tenant == "" {
		capKeys = l.maxAnon
	}
	if (capKeys > 0 && t.running+t.keys >= capKeys) || (l.maxBytes > 0 && t.bytes >= l.maxBytes) {
		retryAfter = time.Second
		if len(t.ends) > 0 {
			retryAfter = max(time.Second, time.Unix(t.ends[0], 0).Sub(now))
		}
		return false, retryAfter
	}
	t.running++
	return true, 0
}

// done ends a call admit counted; created says it left a record of about
// bytes that lives for ttl. A tenant left with nothing is forgotten by
// sweep, not here: a tenant that comes back (every caller does) is not
// made again on each call.
func (l *limiter) done(tenant string, created bool, bytes int64, ttl time.Duration) {
	var end int64
	if created {
		w := int64(bucketWidth / time.Second)
		end = (l.now().Add(ttl).Unix()/w + 1) * w
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[tenant]
	if t == nil {
		return
	}
	t.running--
	if !created {
		return
	}
	c := t.byEnd[end]
	if c == nil {
		if l.buckets >= maxBuckets {
			return
		}
		c = &count{}
		if t.byEnd == nil {
			t.byEnd = map[int64]*count{}
		}
		t.byEnd[end] = c
		heap.Push(&t.ends, end)
		l.buckets++
	}
	c.keys++
	c.bytes += bytes
	t.keys++
	t.bytes += bytes
}
