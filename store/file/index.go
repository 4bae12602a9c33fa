package file

import (
	"sync"

	"github.com/idem-dev/idem/store/internal/packed"
)

// entry is the index's view of one record: the record without its value,
// and where its latest frame lies. At 128 bytes it is kept in the map's
// own slots (Go's maps allocate larger values one by one): no object per
// record for the garbage collector to find and mark, and none to allocate
// per write.
type entry struct {
	rec    packed.Record // the record but its value, which stays on disk
	seq    uint64
	seg    *segment
	off    int64  // the frame's offset in seg
	size   uint32 // the frame's length (put refuses larger frames)
	valAt  uint32 // the value's offset in the frame
	valLen uint32
}

// stripe holds the index entries of the keys that hash to it, and the lock
// that every read-modify-write of those keys holds until its frame is
// durable: so two Reserves of one key cannot both see it absent, and no
// reader sees a write that a crash could still undo. Writers of different
// stripes append concurrently and share their fsyncs.
type stripe struct {
	mu      sync.Mutex
	entries map[keyID]entry // guarded by mu
}

const stripes = 256

func stripeOf(id keyID) int { return int(id[0]) } // key hashes are uniform
