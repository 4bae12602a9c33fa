package expiry

import (
	"container/heap"
	"context"
	"slices"
	"sort"
	"sync"
	"time"
)

// Index holds keys by expiry time, so that cleanup visits only the keys
// that are due. Items sit in buckets of one second, and a min-heap holds
// each bucket's second once: adding an item is an append, and at most a
// short copy to keep the bucket in time order. A key rewritten
// or removed leaves its old item behind; the store's cleanup takes every
// due item and removes a record only when the item still matches its
// expiry (Item.At), so an old item costs one visit, once. It is safe for
// concurrent use.
type Index[K comparable] struct {
	mu      sync.Mutex
	buckets map[int64]*bucket[K] // by the second they fall in; guarded by mu
	secs    SecHeap              // the buckets' seconds; guarded by mu
	newest  *bucket[K]           // the bucket made last, until it is emptied; guarded by mu
	lastAdd int                  // how many items the bucket made last received; guarded by mu
}

// bucket holds the items of one second. Items mostly arrive in time order
// (now plus a TTL): sorted says they still are, so that a cleanup within
// the bucket's second takes the due ones from the front without sorting.
type bucket[K comparable] struct {
	items  []Item[K]
	sorted bool
	moved  int // places items were moved back in all, to keep it sorted
	added  int // items added in all
}

// Item is one key at one expiry time.
type Item[K comparable] struct {
	sec  int64
	nsec int32
	Key  K
}

// ItemOf returns key's item at at.
func ItemOf[K comparable](at time.Time, key K) Item[K] {
	return Item[K]{sec: at.Unix(), nsec: int32(at.Nanosecond()), Key: key}
}

// At reports whether it is at t exactly.
func (it Item[K]) At(t time.Time) bool { return it.sec == t.Unix() && it.nsec == int32(t.Nanosecond()) }

// dueAt reports whether it is due at now (its time is not after now).
func (it Item[K]) dueAt(sec int64, nsec int32) bool {
	return it.sec < sec || (it.sec == sec && it.nsec <= nsec)
}

// New returns an empty index.
func New[K comparable]() *Index[K] { return &Index[K]{buckets: map[int64]*bucket[K]{}} }

// Add indexes key at at.
func (x *Index[K]) Add(key K, at time.Time) {
	it := ItemOf(at, key)
	x.mu.Lock()
	x.add(it)
	x.mu.Unlock()
}

func (x *Index[K]) add(it Item[K]) {
	b := x.buckets[it.sec]
	if b == nil {
		b = &bucket[K]{sorted: true}
		if x.newest != nil {
			x.lastAdd = x.newest.added
		}
		if x.lastAdd > 0 {
			// Steady traffic fills a second's bucket as it filled the
			// one before: room for as many saves growing it by copies.
			b.items = make([]Item[K], 0, x.lastAdd)
		}
		x.newest = b
		x.buckets[it.sec] = b
		heap.Push(&x.secs, it.sec)
	}
	b.added++
	b.items = append(b.items, it)
	n := len(b.items) - 1
	if !b.sorted || n == 0 || b.items[n-1].nsec <= it.nsec {
		return
	}
	// Items arrive nearly in time order: a writer that read the clock
	// before it waited for the store's lock (held by a cleanup, say) lands
	// some places out of it, a few hundred at most in the middleware's
	// benchmark. Moving one into place keeps the bucket sorted, so that a
	// cleanup every few milliseconds within the bucket's second (short
	// TTLs and leases) takes its due items without sorting the rest each
	// time. Items further out of order (records of routes with different
	// TTLs sharing a second), or more moves in all than the bucket holds
	// items, leave the sort to Take instead: adding stays O(1) amortized.
	lo := max(n-insertLimit, 0)
	i := lo + sort.Search(n-lo, func(i int) bool { return b.items[lo+i].nsec > it.nsec })
	if lo > 0 && b.items[lo-1].nsec > it.nsec || b.moved+n-i > n+insertLimit {
		b.sorted = false
		return
	}
	b.moved += n - i
	copy(b.items[i+1:], b.items[i:n])
	b.items[i] = it
}

// insertLimit is how many places add moves an item back to keep its
// bucket sorted, and how many moves a bucket may make beyond one per item.
const insertLimit = 1024

// Take removes and returns up to n items (n > 0) due at now, oldest
// seconds first.
func (x *Index[K]) Take(now time.Time, n int) []Item[K] {
	sec, nsec := now.Unix(), int32(now.Nanosecond())
	var out []Item[K]
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(out) < n && len(x.secs) > 0 && x.secs[0] <= sec {
		s := x.secs[0]
		b := x.buckets[s]
		if s < sec {
			// A past second: every item is due; take from the end.
			k := max(len(b.items)-(n-len(out)), 0)
			out = append(out, b.items[k:]...)
			clear(b.items[k:])
			b.items = b.items[:k]
		} else {
			// Now's own second: the due items are the earliest.
			if !b.sorted {
				slices.SortFunc(b.items, func(a, b Item[K]) int { return int(a.nsec) - int(b.nsec) })
				b.sorted = true
			}
			k := 0
			for k < len(b.items) && len(out) < n && b.items[k].nsec <= nsec {
				out = append(out, b.items[k])
				k++
			}
			clear(b.items[:k])
			b.items = b.items[k:]
			if len(b.items) > 0 {
				break
			}
		}
		if len(b.items) == 0 {
			delete(x.buckets, s)
			heap.Pop(&x.secs)
			if b == x.newest {
				// Its array goes with it; its count stays for the next.
				x.lastAdd, x.newest = b.added, nil
			}
		}
	}
	return out
}

// PutBack returns items taken but not visited.
func (x *Index[K]) PutBack(items []Item[K]) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, it := range items {
		x.add(it)
	}
}

// Due returns a copy of every item due at now, leaving them indexed.
func (x *Index[K]) Due(now time.Time) []Item[K] {
	sec, nsec := now.Unix(), int32(now.Nanosecond())
	var out []Item[K]
	x.mu.Lock()
	defer x.mu.Unlock()
	for s, b := range x.buckets {
		if s > sec {
			continue
		}
		for _, it := range b.items {
			if it.dueAt(sec, nsec) {
				out = append(out, it)
			}
		}
	}
	return out
}

// Items returns a copy of every item, for tests.
func (x *Index[K]) Items() []Item[K] {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Item[K]
	for _, b := range x.buckets {
		out = append(out, b.items...)
	}
	return out
}

// Len returns how many items are indexed, old ones included.
func (x *Index[K]) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, b := range x.buckets {
		n += len(b.items)
	}
	return n
}

// SecHeap is a min-heap of seconds (container/heap), the due order of
// expiry buckets.
type SecHeap []int64

func (h SecHeap) Len() int           { return len(h) }
func (h SecHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h SecHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *SecHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *SecHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// Sweep takes the items due at now, a batch at a time, and calls remove
// for each until limit records were removed (every due one when limit <=
// 0). remove reports whether it removed a record: an item of an earlier
// write or of a released record is not the record's, and is just dropped.
// ctx is checked between items; once it is done, the items not visited are
// put back and Sweep returns its error with the count so far.
func (x *Index[K]) Sweep(ctx context.Context, now time.Time, limit int, remove func(Item[K]) bool) (int, error) {
	n := 0
	for limit <= 0 || n < limit {
		want := 256
		if limit > 0 && limit-n < want {
			want = limit - n
		}
		items := x.Take(now, want)
		if len(items) == 0 {
			break
		}
		for i, it := range items {
			if err := ctx.Err(); err != nil {
				x.PutBack(items[i:])
				return n, err
			}
			if remove(it) {
				n++
			}
		}
	}
	return n, nil
}
