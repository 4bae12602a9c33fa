package file

import (
	"container/heap"
	"encoding/binary"
	"sync"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/expiry"
	"github.com/idem-dev/idem/store/internal/packed"
)

// entry is the index's view of one record: what a write needs to decide
// without reading the disk (does the key exist, has it expired, is its
// lease over) and where its latest frame lies. Everything else (scope,
// key, fingerprint, token, the value) stays in the frame and is read back
// with one pread. 40 bytes, no pointers: the garbage collector never
// scans the index, and ten million keys fit in 400 MB.
type entry struct {
	// tag is bytes 1-11 of the key hash; byte 0 chose the stripe. Two
	// live keys share 96 bits of their SHA-256 with a chance of about
	// 1e-15 among ten million; every read checks the whole hash in the
	// frame all the same, and fails rather than answer for another key.
	tag   [11]byte
	state uint8  // stateFree, or a store.State's index in states
	seg   uint32 // the segment's id
	exp   int64  // ExpiresAt in Unix nanoseconds (see nanos)
	lease int64  // LeaseUntil in Unix nanoseconds
	off   uint32 // the frame's offset in its segment
	size  uint32 // the frame's length
}

// Entry states. stateDeleted marks a released key during recovery only.
const (
	stateFree    uint8 = 0
	stateDeleted uint8 = 4
)

var states = [...]store.State{"", store.InProgress, store.Succeeded, store.Failed}

func stateOf(st store.State) uint8 {
	for i, s := range states {
		if i > 0 && s == st {
			return uint8(i)
		}
	}
	return stateFree
}

// Times are kept in Unix nanoseconds, as packed records keep them.
const noTime = packed.NoTime

func nanos(t time.Time) int64 { return packed.Nanos(t) }

func fromNanos(n int64) time.Time { return packed.FromNanos(n) }

// expSec is the second an expiry time in nanoseconds falls in.
func expSec(ns int64) int64 {
	s := ns / 1e9
	if ns%1e9 < 0 {
		s--
	}
	return s
}

func (e *entry) expired(now int64) bool { return now >= e.exp }

func (e *entry) stale(now int64) bool { return e.state == 1 && now >= e.lease }

func tagOf(id *keyID) (t [11]byte) {
	copy(t[:], id[1:12])
	return t
}

// stripe holds the index entries of the keys that hash to it, and the lock
// that every read-modify-write of those keys holds until its frame is
// durable: so two Reserves of one key cannot both see it absent, and no
// reader sees a write that a crash could still undo. Writers of different
// stripes append concurrently and share their fsyncs.
//
// Entries live in fixed chunks (a slot's entry never moves, so the expiry
// index can name it by number); an open-addressing table of slot numbers,
// probed linearly, finds a key's slot by its tag. Each place of the table
// holds, beside the slot number, the tag's last byte, which the probe
// compares before it reads the entry: a probe past another key's place
// then costs no read of its entry (a cache miss, as a rule), only one in
// 256 does.
type stripe struct {
	mu     sync.Mutex
	n      uint8    // the stripe's number
	table  []uint32 // the tag's last byte<<24 | slot+1, 0 for an empty place; a power of two long
	used   int      // slots in use (in the table)
	chunks []*[chunkLen]entry
	slots  uint32   // slots ever made
	free   []uint32 // slots given back, reused first
	// During recovery only, the seq of each slot's entry: seqs holds the
	// slots from seqBase on, made by the replay; seqOld the slots below
	// it, loaded from the snapshot, that a frame replaced. A slot loaded
	// from the snapshot and not replaced is older than any frame: seq 0.
	// (A slice over every slot would cost 8 bytes a key, allocated and
	// cleared at each Open, to replay a tail that touches few of them.)
	seqBase uint32
	seqs    []uint64
	seqOld  map[uint32]uint64
	// pend holds the reservations of this stripe's keys that returned
	// before their sync (Options.OneSync), until someone learns how it
	// ended (see Store.settlePending), and those whose frame is not
	// written (inMemory), until their holder's next write.
	pend []pending
}

const (
	stripes  = 256
	chunkLen = 256
	// maxSlots bounds a stripe's slots, so that a slot and its stripe fit
	// the expiry index's 32-bit references, and slot+1 a table's place
	// beside the tag's byte: 4 billion keys in all.
	maxSlots = 1 << 24
	slotMask = maxSlots - 1
)

// tagByte is the tag's byte that a table's place holds, in place: the
// last, which home does not use.
func tagByte(tag *[11]byte) uint32 { return uint32(tag[10]) << 24 }

func stripeOf(id keyID) int { return int(id[0]) } // key hashes are uniform

func (st *stripe) at(slot uint32) *entry { return &st.chunks[slot/chunkLen][slot%chunkLen] }

func home(tag *[11]byte, mask int) int { return int(binary.LittleEndian.Uint64(tag[:8])) & mask }

// find returns tag's slot.
func (st *stripe) find(tag [11]byte) (uint32, bool) {
	if len(st.table) == 0 {
		return 0, false
	}
	mask := len(st.table) - 1
	b := tagByte(&tag)
	for i := home(&tag, mask); ; i = (i + 1) & mask {
		v := st.table[i]
		if v == 0 {
			return 0, false
		}
		if v&^slotMask == b && st.at(v&slotMask-1).tag == tag {
			return v&slotMask - 1, true
		}
	}
}

// insert stores e, whose tag is not in the table, in a slot and returns it.
func (st *stripe) insert(e entry) uint32 {
	st.roomForOne()
	slot := st.newSlot(e)
	st.place(slot)
	return slot
}

// insertNew stores e in a slot and returns it, unless e's tag is in the
// table already: then it returns that slot and false. One probe does
// both, where find and insert take two: recovery inserts every key.
func (st *stripe) insertNew(e entry) (uint32, bool) {
	st.roomForOne()
	mask := len(st.table) - 1
	b := tagByte(&e.tag)
	i := home(&e.tag, mask)
	for ; st.table[i] != 0; i = (i + 1) & mask {
		if v := st.table[i]; v&^slotMask == b && st.at(v&slotMask-1).tag == e.tag {
			return v&slotMask - 1, false
		}
	}
	slot := st.newSlot(e)
	st.table[i] = b | (slot + 1)
	return slot, true
}

// roomForOne grows the table if one more entry would fill it past three
// quarters.
func (st *stripe) roomForOne() { st.reserve(st.used + 1) }

// newSlot stores e in a free slot, or a new one, for the caller to place
// in the table.
func (st *stripe) newSlot(e entry) uint32 {
	var slot uint32
	if n := len(st.free); n > 0 {
		slot = st.free[n-1]
		st.free = st.free[:n-1]
	} else {
		if st.slots >= maxSlots-1 {
			panic("file: more than 16 million keys in one stripe of the index")
		}
		slot = st.slots
		st.slots++
		if int(slot/chunkLen) == len(st.chunks) {
			st.chunks = append(st.chunks, new([chunkLen]entry))
		}
	}
	*st.at(slot) = e
	st.used++
	return slot
}

func (st *stripe) place(slot uint32) {
	mask := len(st.table) - 1
	tag := &st.at(slot).tag
	i := home(tag, mask)
	for st.table[i] != 0 {
		i = (i + 1) & mask
	}
	st.table[i] = tagByte(tag) | (slot + 1)
}

// reserve sizes the table for n entries.
func (st *stripe) reserve(n int) {
	for n*4 > len(st.table)*3 {
		st.grow()
	}
}

func (st *stripe) grow() {
	old := st.table
	st.table = make([]uint32, max(16, 2*len(old)))
	for _, v := range old {
		if v != 0 {
			st.place(v&slotMask - 1)
		}
	}
}

// remove frees slot, taking it out of the table (shifting back the
// entries probed past it, so that no tombstone is left).
func (st *stripe) remove(slot uint32) {
	mask := len(st.table) - 1
	i := home(&st.at(slot).tag, mask)
	for st.table[i]&slotMask != slot+1 {
		i = (i + 1) & mask
	}
	for j := i; ; {
		st.table[i] = 0
		for {
			j = (j + 1) & mask
			v := st.table[j]
			if v == 0 {
				*st.at(slot) = entry{}
				st.free = append(st.free, slot)
				st.used--
				return
			}
			k := home(&st.at(v&slotMask-1).tag, mask)
			// v may move back to i unless its home lies cyclically in (i, j].
			if i <= j && (k <= i || k > j) || i > j && k <= i && k > j {
				st.table[i] = v
				i = j
				break
			}
		}
	}
}

// ref names a stripe's slot in 32 bits, for the expiry index.
func ref(stripe int, slot uint32) uint32 { return uint32(stripe)<<24 | slot }

func unref(r uint32) (int, uint32) { return int(r >> 24), r & slotMask }

// expiryIndex holds the index's slots by the second their record expires
// in, 4 bytes an item, so that Cleanup visits only the records that are
// due. Every live entry has an item in its expiry second's bucket; a
// write that moves the expiry to another second adds one there and
// leaves the old one, which Cleanup drops when it comes due (its slot
// expires later, or was freed or reused meanwhile: Cleanup checks the
// slot, never trusts the item).
type expiryIndex struct {
	mu      sync.Mutex
	buckets map[int64][]uint32 // guarded by mu
	secs    secHeap            // the buckets' seconds; guarded by mu
}

func newExpiryIndex() *expiryIndex { return &expiryIndex{buckets: map[int64][]uint32{}} }

func (x *expiryIndex) add(sec int64, r uint32) {
	x.mu.Lock()
	b, ok := x.buckets[sec]
	if !ok {
		heap.Push(&x.secs, sec)
	}
	x.buckets[sec] = append(b, r)
	x.mu.Unlock()
}

// addMany adds the items of each second; the index may keep the slices.
func (x *expiryIndex) addMany(items map[int64][]uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for sec, rs := range items {
		b, ok := x.buckets[sec]
		if !ok {
			heap.Push(&x.secs, sec)
			x.buckets[sec] = rs
			continue
		}
		x.buckets[sec] = append(b, rs...)
	}
}

// take removes and returns up to n items of the earliest second not after
// sec, and that second. Items come in the order they were added, about
// the order their records expire in: in the current second, those
// already due come before the ones that are not.
func (x *expiryIndex) take(sec int64, n int) ([]uint32, int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.secs) == 0 || x.secs[0] > sec {
		return nil, 0, false
	}
	s := x.secs[0]
	b := x.buckets[s]
	k := min(n, len(b))
	out := append([]uint32(nil), b[:k]...)
	if k == len(b) {
		delete(x.buckets, s)
		heap.Pop(&x.secs)
	} else {
		x.buckets[s] = b[k:]
	}
	return out, s, true
}

// putBack returns items that take gave out to the front of sec's
// bucket, where the next take finds them first.
func (x *expiryIndex) putBack(sec int64, items []uint32) {
	if len(items) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	b, ok := x.buckets[sec]
	if !ok {
		heap.Push(&x.secs, sec)
	}
	x.buckets[sec] = append(append(make([]uint32, 0, len(items)+len(b)), items...), b...)
}

// due returns a copy of the items of the seconds not after sec, by second.
func (x *expiryIndex) due(sec int64) map[int64][]uint32 {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[int64][]uint32{}
	for s, b := range x.buckets {
		if s <= sec {
			out[s] = append([]uint32(nil), b...)
		}
	}
	return out
}

// has reports whether r has an item at sec, for tests.
func (x *expiryIndex) has(sec int64, r uint32) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, v := range x.buckets[sec] {
		if v == r {
			return true
		}
	}
	return false
}

type secHeap = expiry.SecHeap
