package file

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	"github.com/idem-dev/idem/store/internal/packed"
)

// entry is the index's view of one record: the record without its value,
// and where its latest frame lies.
type entry struct {
	rec    packed.Record // the record but its value, which stays on disk
	seq    uint64
	seg    *segment
	off    int64 // the frame's offset in seg
	valAt  int   // the value's offset in the frame
	size   int64 // the frame's length
	valLen int
}

// stripe holds the index entries of the keys that hash to it, and the lock
// that every read-modify-write of those keys holds until its frame is
// durable: so two Reserves of one key cannot both see it absent, and no
// reader sees a write that a crash could still undo. Writers of different
// stripes append concurrently and share their fsyncs.
type stripe struct {
	mu      sync.Mutex
	entries map[keyID]*entry // guarded by mu
}

const stripes = 256

func stripeOf(id keyID) int { return int(id[0]) } // key hashes are uniform

// expiry is the index of records by expiry time, so that Cleanup visits only
// the records that are due. Items sit in buckets of one second, and a
// min-heap holds each bucket's second once: adding an item is an append
// (a B-tree's ordered insert and delete cost 5 µs a gateway request on
// this project's machine, under the harness's load, against the
// bucket's append at a fraction of that). A record rewritten or removed
// leaves its old item behind: Cleanup takes every due item and removes a
// record only when the item still matches its expiry, so an old item
// costs one visit, once.
type expiry struct {
	mu      sync.Mutex
	buckets map[int64][]expItem // by the second they fall in; guarded by mu
	secs    secHeap             // the buckets' seconds; guarded by mu
}

type expItem struct {
	sec  int64
	nsec int32
	id   keyID
}

func itemOf(at time.Time, id keyID) expItem {
	return expItem{sec: at.Unix(), nsec: int32(at.Nanosecond()), id: id}
}

// dueAt reports whether it is due at now (its time is not after now).
func (it expItem) dueAt(now expItem) bool {
	return it.sec < now.sec || (it.sec == now.sec && it.nsec <= now.nsec)
}

func newExpiry() *expiry { return &expiry{buckets: map[int64][]expItem{}} }

// set indexes id at at; the item at old, if any, is left to Cleanup.
func (x *expiry) set(id keyID, old time.Time, hadOld bool, at time.Time) {
	if hadOld && old.Equal(at) {
		return
	}
	it := itemOf(at, id)
	x.mu.Lock()
	b, ok := x.buckets[it.sec]
	if !ok {
		heap.Push(&x.secs, it.sec)
	}
	x.buckets[it.sec] = append(b, it)
	x.mu.Unlock()
}

// take removes and returns up to max items (max > 0) due at now, oldest
// seconds first.
func (x *expiry) take(now time.Time, max int) []expItem {
	bound := itemOf(now, keyID{})
	var out []expItem
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(out) < max && len(x.secs) > 0 && x.secs[0] <= bound.sec {
		sec := x.secs[0]
		b := x.buckets[sec]
		// The last items first: the bucket shrinks in place.
		i := len(b) - 1
		for ; i >= 0 && len(out) < max; i-- {
			if !b[i].dueAt(bound) {
				break
			}
			out = append(out, b[i])
		}
		if i >= 0 && !b[i].dueAt(bound) {
			// Now's own second, with items not due yet: sort the rest so
			// that the due ones come last, and stop there next time.
			rest := b[:i+1]
			slices.SortFunc(rest, func(a, b expItem) int { return int(b.nsec) - int(a.nsec) })
			j := len(rest)
			for j > 0 && rest[j-1].dueAt(bound) && len(out) < max {
				out = append(out, rest[j-1])
				j--
			}
			x.buckets[sec] = rest[:j]
			break
		}
		if i < 0 {
			delete(x.buckets, sec)
			heap.Pop(&x.secs)
			continue
		}
		x.buckets[sec] = b[:i+1]
	}
	return out
}

// putBack returns items taken but not visited.
func (x *expiry) putBack(items []expItem) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, it := range items {
		b, ok := x.buckets[it.sec]
		if !ok {
			heap.Push(&x.secs, it.sec)
		}
		x.buckets[it.sec] = append(b, it)
	}
}

// due returns a copy of every item due at now, leaving them indexed.
func (x *expiry) due(now time.Time) []expItem {
	bound := itemOf(now, keyID{})
	var out []expItem
	x.mu.Lock()
	defer x.mu.Unlock()
	for sec, b := range x.buckets {
		if sec > bound.sec {
			continue
		}
		for _, it := range b {
			if it.dueAt(bound) {
				out = append(out, it)
			}
		}
	}
	return out
}

// items returns a copy of every item, for tests.
func (x *expiry) items() []expItem {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []expItem
	for _, b := range x.buckets {
		out = append(out, b...)
	}
	return out
}

type secHeap []int64

func (h secHeap) Len() int           { return len(h) }
func (h secHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h secHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *secHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *secHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
