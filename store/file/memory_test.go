package file

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
)

// TestIndexBytesPerKey puts a million entries in the index (as a million
// written keys would: in the stripes' tables and chunks, with their
// expiry items, half of them with a second item as a completion that
// moved the expiry leaves) and measures the Go heap they take. The
// brief's bound is 64 bytes a live key, all included; bench/cmd/filescale
// measures the same through the store's writes, RSS included
// (docs/bench/FILE-INDEX.md).
func TestIndexBytesPerKey(t *testing.T) {
	s := openT(t, t.TempDir())
	const n = 1_000_000
	seg := uint32(s.log.active.id)
	base := time.Now().Add(time.Hour).UnixNano()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var id keyID
	for i := range n {
		binary.LittleEndian.PutUint64(id[:], uint64(i)*0x9E3779B97F4A7C15)
		binary.LittleEndian.PutUint64(id[8:], uint64(i))
		st := &s.stripes[stripeOf(id)]
		e := entry{tag: tagOf(&id), state: 1, seg: seg, exp: base + int64(i)*1000, lease: base, off: 8, size: 300}
		st.mu.Lock()
		slot := s.index(st, -1, &e)
		if i%2 == 0 {
			e.state, e.exp = 2, e.exp+2e9 // completed: its expiry moved
			s.index(st, slot, &e)
		}
		st.mu.Unlock()
	}
	per := float64(heap()-before) / n
	t.Logf("%.1f bytes of heap per key at %d keys", per, n)
	if per > 64 {
		t.Fatalf("the index takes %.1f bytes per key, more than 64", per)
	}
	if got := s.count(); got != n {
		t.Fatalf("%d keys indexed, want %d", got, n)
	}
	// The entries point to nothing on disk: take them out before Close
	// writes a snapshot of them.
	for i := range s.stripes {
		s.stripes[i] = stripe{n: uint8(i)}
	}
}
