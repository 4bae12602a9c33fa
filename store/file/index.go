package file

import (
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/idem-dev/idem/store"
)

// entry is the index's view of one record: the record without its value,
// and where its latest frame lies.
type entry struct {
	rec    store.Record // Value is nil: it stays on disk
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
// the records that are due.
type expiry struct {
	mu sync.Mutex
	t  *btree.BTreeG[expItem] // guarded by mu
}

type expItem struct {
	sec  int64
	nsec int32
	id   keyID
}

func itemOf(at time.Time, id keyID) expItem {
	return expItem{sec: at.Unix(), nsec: int32(at.Nanosecond()), id: id}
}

func expLess(a, b expItem) bool {
	if a.sec != b.sec {
		return a.sec < b.sec
	}
	if a.nsec != b.nsec {
		return a.nsec < b.nsec
	}
	return string(a.id[:]) < string(b.id[:])
}

func newExpiry() *expiry { return &expiry{t: btree.NewG(32, expLess)} }

// set moves id's item from old to at; hadOld says whether it had one.
func (x *expiry) set(id keyID, old time.Time, hadOld bool, at time.Time) {
	if hadOld && old.Equal(at) {
		return
	}
	x.mu.Lock()
	if hadOld {
		x.t.Delete(itemOf(old, id))
	}
	x.t.ReplaceOrInsert(itemOf(at, id))
	x.mu.Unlock()
}

// remove deletes id's item at at.
func (x *expiry) remove(id keyID, at time.Time) {
	x.mu.Lock()
	x.t.Delete(itemOf(at, id))
	x.mu.Unlock()
}

// due returns up to max keys (all when max <= 0) whose expiry is not after
// now, oldest first.
func (x *expiry) due(now time.Time, max int) []expItem {
	bound := itemOf(now, keyID{})
	bound.nsec++ // every item at or before now, whatever its key
	var out []expItem
	x.mu.Lock()
	x.t.AscendLessThan(bound, func(it expItem) bool {
		out = append(out, it)
		return max <= 0 || len(out) < max
	})
	x.mu.Unlock()
	return out
}

// count returns how many items are due at now.
func (x *expiry) count(now time.Time) int {
	bound := itemOf(now, keyID{})
	bound.nsec++
	n := 0
	x.mu.Lock()
	x.t.AscendLessThan(bound, func(expItem) bool { n++; return true })
	x.mu.Unlock()
	return n
}
