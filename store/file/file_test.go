package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

var quiet = Options{Logger: slog.New(slog.DiscardHandler)}

// harness is the store as the tests it shares with store/pebble open it.
var harness = localtest.Harness{
	Open:        localtest.Opener(Open, quiet, func(o *Options, wall func() time.Time) { o.WallClock = wall }),
	OpenOneSync: localtest.Opener(Open, Options{Logger: quiet.Logger, OneSync: true}, func(o *Options, wall func() time.Time) { o.WallClock = wall }),
	Format1:     "v1log",
	IndexKeys:   func(t *testing.T, s store.Store) []string { return indexKeys(s.(*Store)) },
	Records:     func(t testing.TB, s store.Store) map[string]*store.Record { return checkIndex(t, s.(*Store)) },
	ENOSPC:      true,
	Syncs:       func(t *testing.T, s store.Store) uint64 { return s.(*Store).log.syncs.Load() },
	// Alone, every write waits for its own fdatasync; up to twenty
	// attempts (a few milliseconds each) let concurrent ones share them.
	GroupShare:    2,
	GroupAttempts: 20,
	CountExpired:  func(ctx context.Context, s store.Store) (int, error) { return s.(*Store).CountExpired(ctx) },
	Scanned:       func(s store.Store) *int { return &s.(*Store).scanned },
	ErrLocked:     ErrLocked,
}

func TestMain(m *testing.M) {
	localtest.Main(m, harness, map[string]func(dir, round string) int{"snap": snapChild})
}

// TestLocal runs the tests the embedded stores share (localtest.Run):
// the conformance suite, locking, wall-clock jumps, format 1, the expiry
// index, group commit, kill -9, and kill -9 on a full disk.
func TestLocal(t *testing.T) {
	t.Parallel()
	localtest.Run(t, harness)
}

func openT(t testing.TB, dir string, opts ...func(*Options)) *Store {
	t.Helper()
	return localtest.OpenT(t, Open, dir, quiet, opts...)
}

// TestConformanceSmallSegments runs the suite with segments a few records
// long, so that rotation, dropping and compaction happen inside it.
func TestConformanceSmallSegments(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return openT(t, t.TempDir(), func(o *Options) { o.SegmentBytes = 2 << 10 })
		},
		IndexKeys: func(t *testing.T, s store.Store) []string { return indexKeys(s.(*Store)) },
		Swept:     func(s store.Store) int { return int(s.(*Store).swept.Load()) },
	})
}

// indexKeys lists what the in-memory index is keyed by: the first 12
// bytes of each key hash (the stripe's number and the entry's tag), each
// completed with the rest of the hash from the frame the entry points to,
// which is what the tag stands for.
func indexKeys(s *Store) []string {
	var keys []string
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		s.settlePending(st, nil) // frames read back must be written
		for slot := range st.slots {
			e := st.at(slot)
			if e.state == stateFree {
				continue
			}
			var head [bodyHeader]byte
			if _, err := s.log.segment(e.seg).f.ReadAt(head[:], int64(e.off)+frameHeader); err != nil {
				panic(err)
			}
			keys = append(keys, fmt.Sprintf("%02x%x%x", i, e.tag, head[9+12:41]))
		}
		st.mu.Unlock()
	}
	return keys
}

// checkIndex verifies that every record has an expiry item in its
// ExpiresAt's second, that its frame on disk is its key's and agrees with
// the index, that the table finds every slot, and that each segment's
// live bytes are the frames the index points to. It returns the records.
func checkIndex(t testing.TB, s *Store) map[string]*store.Record {
	t.Helper()
	records := map[string]*store.Record{}
	live := map[uint32]int64{}
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		s.settlePending(st, nil) // frames read back must be written
		n := 0
		for slot := range st.slots {
			e := st.at(slot)
			if e.state == stateFree {
				continue
			}
			n++
			if got, ok := st.find(e.tag); !ok || got != slot {
				t.Fatalf("stripe %d: slot %d is not found by its tag (%d %v)", i, slot, got, ok)
			}
			var id keyID
			id[0] = byte(i)
			copy(id[1:], e.tag[:])
			// The frame holds the whole key hash: the tag's rest is read
			// from it.
			seg := s.log.segment(e.seg)
			var head [bodyHeader]byte
			if _, err := seg.f.ReadAt(head[:], int64(e.off)+frameHeader); err != nil {
				t.Fatal(err)
			}
			copy(id[:], head[9:41])
			r, err := s.record(&id, e, s.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if nanos(r.ExpiresAt) != e.exp || stateOf(r.State) != e.state {
				t.Fatalf("record %s: the index says %d %d, the frame %v %s", r.KeyHash, e.exp, e.state, r.ExpiresAt, r.State)
			}
			records[r.KeyHash] = &r
			live[e.seg] += int64(e.size)
			if !s.exp.has(expSec(e.exp), ref(i, slot)) {
				t.Fatalf("record %s has no expiry item at %v", r.KeyHash, r.ExpiresAt)
			}
		}
		if n != st.used {
			t.Fatalf("stripe %d counts %d entries, holds %d", i, st.used, n)
		}
		st.mu.Unlock()
	}
	// The items left are of earlier writes and released records: each
	// costs Cleanup one visit, once its time comes.
	s.log.mu.Lock()
	for _, seg := range s.log.segs {
		if got := seg.live.Load(); got != live[uint32(seg.id)] {
			t.Fatalf("segment %d counts %d live bytes, the index points to %d", seg.id, got, live[uint32(seg.id)])
		}
	}
	s.log.mu.Unlock()
	return records
}

// TestReopen checks that the log replays to the same records: completed,
// in progress, taken over, released (which must stay released).
func TestReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir)
	ctx := context.Background()
	done := localtest.ReserveReq("done", time.Hour)
	held := localtest.ReserveReq("held", time.Hour)
	gone := localtest.ReserveReq("gone", time.Hour)
	for _, r := range []store.ReserveRequest{done, held, gone} {
		if _, err := s.Reserve(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	localtest.Complete(t, s, done, "the answer", time.Hour)
	if err := s.Release(ctx, localtest.FenceOf(gone)); err != nil {
		t.Fatal(err)
	}
	before := checkIndex(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	after := checkIndex(t, s)
	if len(after) != 2 || len(before) != 2 {
		t.Fatalf("records before %d, after %d; want 2 and 2", len(before), len(after))
	}
	for h, r := range before {
		if a := after[h]; a == nil || a.State != r.State || string(a.Value) != string(r.Value) || a.Token != r.Token {
			t.Fatalf("record %s: before %+v, after %+v", h, r, a)
		}
	}
	if r := after[done.Record.KeyHash]; r == nil || string(r.Value) != "the answer" {
		t.Fatalf("completed record after reopen: %+v", r)
	}
	// New writes after a reopen get seqs above every replayed one.
	again := localtest.ReserveReq("gone", time.Hour)
	if res, err := s.Reserve(ctx, again); err != nil || !res.Acquired {
		t.Fatalf("reserve released key: %+v %v", res, err)
	}
}

// TestTornTail cuts the log inside its last frame, as a crash in the middle
// of a write can: the open drops the unacknowledged frame and keeps the rest.
func TestTornTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := localtest.ReserveReq("a", time.Hour)
	b := localtest.ReserveReq("b", time.Hour)
	// Cut inside b's body, inside its frame header, and append garbage
	// that fails its checksum.
	for _, damage := range []string{"cut 3", "cut 9", "garbage", "frame after a gap"} {
		dir := t.TempDir()
		s, err := Open(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []store.ReserveRequest{a, b} {
			if _, err := s.Reserve(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		path := s.log.active.path
		bid := mustID(t, b.Record.KeyHash)
		_, be := lookup(&s.stripes[stripeOf(bid)], &bid)
		bFrame := int64(be.size)
		// The log's end, not the file's: the file is allocated ahead.
		end := s.log.active.size
		s.Close()
		want := 1
		switch damage {
		case "cut 3":
			err = os.Truncate(path, end-3)
		case "cut 9":
			err = os.Truncate(path, end-bFrame+5)
		case "garbage":
			want = 2
			err = writeAt(path, end, []byte{0, 0, 0, 5, 1, 2, 3, 4, 9, 9, 9, 9, 9})
		case "frame after a gap":
			// b's frame copied 100 bytes past the end, zeros between: a
			// write whose later pages reached the disk and earlier ones
			// did not. It was never acknowledged and must not come back.
			want = 1
			var data []byte
			if data, err = os.ReadFile(path); err == nil {
				if err = os.Truncate(path, end-bFrame); err == nil {
					err = writeAt(path, end-bFrame+100, data[end-bFrame:end])
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		s = openT(t, dir)
		recs := checkIndex(t, s)
		if len(recs) != want || recs[a.Record.KeyHash] == nil {
			t.Fatalf("%s: %d records, want %d", damage, len(recs), want)
		}
		if want == 1 {
			if res, err := s.Reserve(ctx, b); err != nil || !res.Acquired {
				t.Fatalf("%s: b after recovery: %+v %v", damage, res, err)
			}
		}
		s.Close()
		s = openT(t, dir) // the repaired log replays cleanly
		if recs := checkIndex(t, s); len(recs) != 2 {
			t.Fatalf("%s: after repair and a write, %d records", damage, len(recs))
		}
	}
}

func mustID(t testing.TB, h string) keyID {
	t.Helper()
	id, err := parseKeyHash(h)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestCorruptMiddle damages a frame that is not the log's tail: that is not
// a torn write, and the open must fail rather than skip records. (Without
// the index snapshot: with it, Open does not read sealed segments; see
// TestCorruptSealedLiveFrame.)
func TestCorruptMiddle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := openT(t, dir, func(o *Options) { o.SegmentBytes = 512 })
	for i := range 20 {
		req := localtest.ReserveReq(fmt.Sprint(i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		localtest.Complete(t, s, req, strings.Repeat("v", 100), time.Hour)
	}
	s.Close()
	// The oldest segment left: a reclaim may have dropped the first.
	ids, err := segmentIDs(dir)
	if err != nil || len(ids) < 2 {
		t.Fatalf("segments %v, %v", ids, err)
	}
	first := filepath.Join(dir, segmentName(ids[0]))
	if err := os.Remove(filepath.Join(dir, snapshotFile)); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(first)
	data[len(segmentMagic)+frameHeader+20] ^= 0xff
	os.WriteFile(first, data, 0o600)
	if _, err := Open(dir, quiet); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a damaged first segment: %v, want ErrCorrupt", err)
	}
}

// TestCorruptSealedLiveFrame damages the live frame of a key in a segment
// that the index snapshot covers: Open does not read it, and a read of
// the key fails with ErrCorrupt rather than answer with damaged data.
func TestCorruptSealedLiveFrame(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	// cleanupOnly: a reclaim on rotation may copy key 0's live frame into
	// the active segment, which this test must find in a sealed one.
	s := openT(t, dir, func(o *Options) { o.SegmentBytes = 512; o.cleanupOnly = true })
	var reqs []store.ReserveRequest
	for i := range 20 {
		req := localtest.ReserveReq(fmt.Sprint(i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		localtest.Complete(t, s, req, strings.Repeat("v", 100), time.Hour)
		reqs = append(reqs, req)
	}
	id := mustID(t, reqs[0].Record.KeyHash)
	_, e := lookup(&s.stripes[stripeOf(id)], &id)
	path := s.log.segment(e.seg).path
	if e.seg == uint32(s.log.active.id) {
		t.Fatal("key 0's frame is in the active segment")
	}
	s.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[int(e.off)+int(e.size)-3] ^= 0xff // in the stored value
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	if s.snapFirst.Load() == 0 {
		t.Fatal("the store did not open from its snapshot")
	}
	if _, err := s.Get(ctx, "", reqs[0].Record.KeyHash); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of the damaged record: %v, want ErrCorrupt", err)
	}
	if r, err := s.Get(ctx, "", reqs[1].Record.KeyHash); err != nil || string(r.Value) != strings.Repeat("v", 100) {
		t.Fatalf("Get of another record: %+v %v", r, err)
	}
}

// TestSegmentsReclaimed writes through many small segments, expires most
// records, and checks that Cleanup drops and compacts segments, that disk
// use falls, and that what is left replays exactly, released keys included.
func TestSegmentsReclaimed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	small := func(o *Options) { o.SegmentBytes = 4 << 10 }
	s, err := Open(dir, Options{Logger: quiet.Logger, SegmentBytes: 4 << 10, cleanupOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	var released []store.ReserveRequest
	var last store.ReserveRequest
	for i := range 400 {
		ttl := localtest.Short
		if i%10 == 0 {
			ttl = 30 * 24 * time.Hour // a few long-lived records among short ones
			keep[store.HashKey("s", fmt.Sprint(i))] = true
		}
		req := localtest.ReserveReq(fmt.Sprint(i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%37 == 5 {
			delete(keep, req.Record.KeyHash)
			if err := s.Release(ctx, localtest.FenceOf(req)); err != nil {
				t.Fatal(err)
			}
			released = append(released, req)
			continue
		}
		localtest.Complete(t, s, req, strings.Repeat("x", 60), ttl)
		if ttl == localtest.Short {
			last = req
		}
	}
	localtest.Gone(t, s, last)
	segsBefore, bytesBefore := segmentFiles(t, dir)
	n, err := s.Cleanup(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	segsAfter, bytesAfter := segmentFiles(t, dir)
	t.Logf("cleanup removed %d records; segments %d -> %d, bytes %d -> %d", n, segsBefore, segsAfter, bytesBefore, bytesAfter)
	if bytesAfter*3 > bytesBefore {
		t.Fatalf("disk use %d -> %d bytes: want at least two thirds reclaimed", bytesBefore, bytesAfter)
	}
	recs := checkIndex(t, s)
	if len(recs) != len(keep) {
		t.Fatalf("%d records live, want %d", len(recs), len(keep))
	}
	s.Close()
	s = openT(t, dir, small)
	recs = checkIndex(t, s)
	for h := range keep {
		if r := recs[h]; r == nil || r.State != store.Succeeded || len(r.Value) != 60 {
			t.Fatalf("long-lived record %s after compaction and reopen: %+v", h, r)
		}
	}
	// Expired records of segments not yet reclaimed replay as expired:
	// only live ones count.
	now := s.clock.Now()
	for h, r := range recs {
		if !r.ExpiresAt.After(now) {
			delete(recs, h)
		}
	}
	if len(recs) != len(keep) {
		t.Fatalf("after reopen, %d records, want %d (a released or expired record came back?)", len(recs), len(keep))
	}
	for _, r := range released {
		if _, err := s.Get(ctx, "s", r.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("released key %s came back: %v", r.Record.Key, err)
		}
	}
}

func segmentFiles(t *testing.T, dir string) (n int, size int64) {
	t.Helper()
	ids, err := segmentIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(dir, segmentName(id)))
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	return len(ids), size
}

func TestRefusesPebbleDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "MANIFEST-000001"), []byte("x"), 0o600)
	_, err := Open(dir, quiet)
	if !errors.Is(err, ErrOtherFormat) || !strings.Contains(err.Error(), "pebble:") {
		t.Fatalf("open of a Pebble directory: %v", err)
	}
}

func TestRejectsMalformedKeyHash(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	req := localtest.ReserveReq("k", time.Hour)
	req.Record.KeyHash = "not-a-hash"
	if _, err := s.Reserve(context.Background(), req); err == nil {
		t.Fatal("a malformed key hash was accepted")
	}
}

// TestWake: two engines over one file store (the gateway's routes) wake
// each other's waiters through the store.
func TestWake(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	storetest.RunWake(t, s, s)
}

func writeAt(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(b, off)
	return err
}

// TestZeroFilled checks that segments are written with zeros ahead of
// their frames (so that fdatasync commits no block allocation), that no
// fill ever overwrites a frame, across fills and segment rotations, with
// the sync waiting on a fill or growing the file past it, that the zeros
// after the last frame read as the log's end when the store reopens, and
// that writes after reopening land after the last frame, not after the
// zeros.
func TestZeroFilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// Segments of a little more than one fill each.
	s := openT(t, dir, func(o *Options) { o.SegmentBytes = zeroAhead + zeroAhead/4; o.MinSegmentBytes = o.SegmentBytes })
	if _, err := s.Reserve(ctx, localtest.ReserveReq("a", time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.log.fills.Wait()
	path, end := s.log.active.path, s.log.active.size
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) < end+zeroGap+zeroAhead {
		t.Fatalf("segment is %d bytes with %d written: not filled ahead", len(data), end)
	}
	if !allZero(data[end:]) {
		t.Fatal("the bytes after the last frame are not zeros")
	}
	// About 15 MiB of frames from 16 writers: several fills and segment
	// rotations, with frames arriving while fills run, and catching up
	// with fills made slow.
	s.log.slowFill = func() { time.Sleep(20 * time.Millisecond) }
	const writers, each = 16, 375
	val := bytes.Repeat([]byte("v"), 2500)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				req := localtest.ReserveReq(fmt.Sprintf("w%d-%d", w, i), time.Hour)
				if _, err := s.Reserve(ctx, req); err != nil {
					errs <- err
					return
				}
				if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded,
					Value: val, TTL: time.Hour}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.log.segs); n < 3 {
		t.Fatalf("%d segments: the test did not rotate", n)
	}
	// One more write once every fill ended: the last segment gets a
	// fill of its own, so that the store reopens inside its zeros.
	s.log.fills.Wait()
	if _, err := s.Reserve(ctx, localtest.ReserveReq("c", time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	if recs := checkIndex(t, s); len(recs) != 2+writers*each {
		t.Fatalf("%d records after reopening, want %d", len(recs), 2+writers*each)
	}
	last := s.log.active
	if fi, err := os.Stat(last.path); err != nil || fi.Size() <= last.size {
		t.Fatalf("the last segment (%v) holds no zeros after its frames: the test did not reopen inside zeros", err)
	}
	if _, err := s.Reserve(ctx, localtest.ReserveReq("b", time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	if recs := checkIndex(t, s); len(recs) != 3+writers*each {
		t.Fatalf("%d records after two reopenings, want %d", len(recs), 3+writers*each)
	}
}

// TestEntrySize: the index's memory is its entries; the package doc's
// bytes per key count on 40 bytes and no pointer.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 40 {
		t.Fatalf("entry is %d bytes", n)
	}
}

// TestTooLarge: a value whose frame passes 64 MiB (which recovery would
// read as damage) is refused with ErrTooLarge; the record stays as it was and
// the store goes on. The 4 GiB value is never written to: the operating
// system gives its pages on first touch, so it costs address space only.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	ctx := context.Background()
	a := localtest.Reserved(t, s, "a", time.Hour)
	huge := make([]byte, 1<<32)
	err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(a), State: store.Succeeded, Value: huge, TTL: time.Hour})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 4 GiB value: %v", err)
	}
	rec, err := s.Get(ctx, a.Record.Scope, a.Record.KeyHash)
	if err != nil || rec.State != store.InProgress {
		t.Fatalf("after the refusal: %+v %v", rec, err)
	}
	if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(a), State: store.Succeeded, Value: []byte("A"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
}

// TestLargestFrame: a value just over 64 MiB is refused (recovery reads a
// longer frame as damage, so it would have been lost, or failed the next
// Open), and one a little under is kept, and replays after a reopen.
func TestLargestFrame(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir)
	ctx := context.Background()
	a, b := localtest.ReserveReq("a", time.Hour), localtest.ReserveReq("b", time.Hour)
	for _, r := range []store.ReserveRequest{a, b} {
		if _, err := s.Reserve(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(a), State: store.Succeeded, Value: make([]byte, maxBody+1), TTL: time.Hour})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a value of 64 MiB + 1: %v", err)
	}
	big := bytes.Repeat([]byte("v"), maxBody-4096)
	if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(b), State: store.Succeeded, Value: big, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	if r, err := s.Get(ctx, "", b.Record.KeyHash); err != nil || !bytes.Equal(r.Value, big) {
		t.Fatalf("the largest value after a reopen: %d bytes, %v", len(r.Value), err)
	}
}

// TestFailedSyncKeepsSegment: a take-over of a stale reservation (no
// OneSync: Reserve waits for its sync, holding the key's stripe) leaves
// the segment of the stale frame with no live bytes while the sync runs;
// a Cleanup then must not drop that segment before the sync ends, for
// when it fails, the stale reservation is the key's state again, read
// from that segment, now and after a reopen. A sync ahead of the
// take-over's is held back (a zero-fill that waits, which its write must
// not overtake) until the Cleanup has returned or waits.
func TestFailedSyncKeepsSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	opts := func(o *Options) {
		o.SegmentBytes, o.MinSegmentBytes = 1<<20, 1<<20
		o.cleanupOnly = true
		o.now = func() time.Time { return time.Unix(0, clock.Load()) }
	}
	s := openT(t, dir, opts)
	s.log.freeBytes = func() (int64, error) { return 1 << 40, nil } // zeros are written ahead
	var staleSeg atomic.Uint32
	release := make(chan struct{})
	s.log.slowFill = func() {
		s.log.zmu.Lock()
		id := s.log.fill.seg.id
		s.log.zmu.Unlock()
		if seg := staleSeg.Load(); seg != 0 && uint32(id) > seg {
			<-release
		}
	}
	stale := localtest.Leased("stale", time.Minute, time.Hour)
	stale.TakeOverStale = true
	if res, err := s.Reserve(ctx, stale); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	id := mustID(t, stale.Record.KeyHash)
	_, e := lookup(&s.stripes[stripeOf(id)], &id)
	staleSeg.Store(e.seg)
	big := localtest.ReserveReq("big", time.Hour)
	fillHeld(t, s, e.seg, big)

	// A sync of 300 KiB, past where the held fill starts: it waits.
	completed := make(chan error, 1)
	go func() {
		completed <- s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(big), State: store.Succeeded,
			Value: make([]byte, 300<<10), TTL: time.Hour})
	}()
	waitLog(s, func() bool { return s.log.run != nil })
	clock.Add(int64(2 * time.Minute))
	next := localtest.Leased("stale", time.Minute, time.Hour)
	next.TakeOverStale = true
	tookOver := make(chan error, 1)
	go func() {
		_, err := s.Reserve(ctx, next)
		tookOver <- err
	}()
	waitLog(s, func() bool { return len(s.log.buf) > 0 }) // the take-over's frame waits behind
	failed := errors.New("injected: the sync fails")
	s.log.broken.Store(&failed)
	cleaned := make(chan error, 1)
	go func() {
		_, err := s.Cleanup(ctx, 0)
		cleaned <- err
	}()
	// Cleanup drops the segment at once if it does not wait for the
	// take-over's sync; if it waits, the held fill keeps it waiting.
	select {
	case err := <-cleaned:
		cleaned <- err
	case <-time.After(time.Second):
	}
	close(release)
	if err := <-completed; err != nil {
		t.Fatalf("the Complete ahead of the take-over: %v", err)
	}
	if err := <-tookOver; !errors.Is(err, failed) {
		t.Fatalf("the take-over whose sync failed: %v, want the injected error", err)
	}
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	staleStands(t, s, dir, opts, stale)
}

// fillHeld writes to s, reserving big first, released fillers after,
// until the log has moved past segment seg and a zero-fill of the
// segment being written has started (one that slowFill holds). The
// frames written to seg meanwhile are released: seg's only live frame
// is the one it had.
func fillHeld(t *testing.T, s *Store, seg uint32, big store.ReserveRequest) {
	t.Helper()
	ctx := context.Background()
	value := make([]byte, 100<<10)
	reserved := false
	for i := 0; ; i++ {
		past := uint32(s.log.activeID()) > seg
		if past && !reserved {
			if _, err := s.Reserve(ctx, big); err != nil {
				t.Fatal(err)
			}
			reserved = true
			continue
		}
		s.log.zmu.Lock()
		held := past && s.log.fill != nil && uint32(s.log.fill.seg.id) > seg
		s.log.zmu.Unlock()
		if held {
			return
		}
		req := localtest.ReserveReq(fmt.Sprint("filler", i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		if !past { // a failed record, which Release frees too
			if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Failed, Value: value, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Release(ctx, localtest.FenceOf(req)); err != nil {
			t.Fatal(err)
		}
	}
}

// waitLog waits until cond, read under the log's mutex, holds.
func waitLog(s *Store, cond func() bool) {
	for {
		s.log.mu.Lock()
		ok := cond()
		s.log.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
