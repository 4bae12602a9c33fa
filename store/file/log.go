package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/diskroom"
)

// segment is one file of the log.
type segment struct {
	id   uint64
	path string
	// f is the segment's file. A segment is made in memory when the log
	// rotates to it, and its file by the sync that writes its first frames
	// (with the header), so that neither a rotation nor Open needs room on
	// the disk. Nil until then; set under log.mu.
	f *os.File
	// size is the bytes appended to the segment, written or still in the
	// log's buffer; guarded by log.mu.
	size int64
	// synced is the bytes of the segment known durable; guarded by log.mu.
	// A segment whose size passes it has a sync under way.
	synced int64
	// live is the bytes of the frames that the index points to: the
	// segment's share of live data, which decides when to compact it.
	live atomic.Int64
	// written is the bytes written to the file; only the running sync
	// (or recovery, before any) touches it.
	written int64
	// named: the segment's directory entry is durable. Only the running
	// sync (or recovery) touches it.
	named bool
	// ready bounds where frames may go: no zero-fill writes below it.
	// Up to it the file holds zeros written ahead (see zeroAhead), or
	// frames, or a hole the sync left for a fill to start past.
	ready atomic.Int64
	// limit is the size past which the log moves on from this segment,
	// set when the log moves to it (rollSize); fills stop there.
	limit int64
}

// zeroAhead is how far ahead of its frames a segment's file is written
// with zeros, and synced, by a goroutine of its own. An fdatasync after an
// append that grows the file must also commit the new size and blocks
// through the filesystem's journal, and so must one that writes into space
// allocated by fallocate (its extents are marked unwritten until then);
// over zeros already written it flushes the data alone, at about half the
// CPU of an append that grows the file (docs/bench/FILE-LOG.md).
// PostgreSQL zero-fills its WAL segments for the same reason. Every byte of the log is written
// twice; the zeros are written in zeroPiece pieces, off the writers' path,
// and at most zeroAhead of them are left at a segment's end, which
// recovery reads as its end.
//
// A fill starts zeroGap past the frames when it has no zeros to extend (a
// new segment), so that the sync goes on writing (growing the file) while
// its first piece is written, rather than wait for it.
//
// Zeros are written only while the filesystem keeps fillReserve free
// beyond the piece: preallocation is a speed-up, and never takes the room
// that frames need. A piece that fails all the same (another process took
// the room) is cut off again, and no fill starts for fillPause.
const (
	zeroAhead   = 4 << 20
	zeroPiece   = 1 << 20
	zeroGap     = 256 << 10
	fillReserve = 2 * zeroAhead
	fillPause   = time.Second
)

// zeros is a piece of zeros, made when the first fill starts rather than
// in every program that links the store.
var zeros = sync.OnceValue(func() []byte { return make([]byte, zeroPiece) })

func segmentName(id uint64) string { return fmt.Sprintf("%016d.log", id) }

// batch is the frames that one sync writes: their writers wait on done,
// and read err once it is closed.
type batch struct {
	done chan struct{}
	err  error // set before done is closed
}

func newBatch() *batch { return &batch{done: make(chan struct{})} }

// log appends frames to the active segment and makes them durable with
// group commit: a writer appends its frame to a shared buffer, then waits
// until a sync covers it. The first waiter to find no sync running becomes
// the syncer: it takes the whole buffer (its own frame and every frame
// appended meanwhile, one batch), writes it with one write and one
// fdatasync, and wakes everyone it covered at once by closing the batch's
// channel. Writers that arrive during a sync form the next batch. A lone
// writer pays one fsync; 64 concurrent writers share about one fsync per
// group, and no writer ever waits on a timer.
//
// A writer about to sync yields once first when the last sync covered more
// than one writer: the goroutines ready to run (requests on their way to
// the store) append before it takes the buffer, and share its fsync: in
// the gateway under the benchmark harness's load each fsync covered about
// twice the bytes (docs/bench/FILE-LOG.md). A lone writer, whose last
// sync covered only itself, never yields.
//
// Waiters sleep on the channel, not on a mutex: a mutex would hand the
// lock from one waiter to the next, each checking that it is covered and
// leaving, one context switch after another, which left 64 writers well
// behind Pebble's pipeline (docs/bench/FILE-LOG.md).
//
// # A failed write
//
// A write or fdatasync that fails (a full disk, an I/O error) fails its
// batch and every frame appended after it, none of which was
// acknowledged, and not the store: the log cuts its file back to where
// the batch began (truncated and synced, so that no part of the failed
// frames can be read later, by this process or by recovery) and the next
// sync writes there. The writers put their index entries back as they
// were. Until a sync succeeds again the log is unwritable: new
// reservations are refused at once (admit), except for one try every
// retryEvery while the filesystem has the headroom free; any write that
// succeeds with the headroom free makes the log writable again. Should the cut itself fail, the
// log no longer knows what its tail holds and refuses every write until
// the store is opened again (broken).
type log struct {
	dir        string
	minSegment int64 // Options.MinSegmentBytes
	maxSegment int64 // Options.SegmentBytes

	mu     sync.Mutex
	active *segment            // guarded by mu
	segs   map[uint64]*segment // every segment not yet dropped; guarded by mu
	// byID holds segs for readers that must not wait on mu (index entries
	// name their segment by id).
	byID    sync.Map
	nextID  uint64 // guarded by mu
	buf     []byte // frames appended, not yet written; guarded by mu
	spare   []byte // the buffer of the previous sync, reused; guarded by mu
	cur     *batch // the batch frames are appended to; guarded by mu
	run     *batch // the batch being synced, nil when none; guarded by mu
	frames  int    // frames appended since the last sync began; guarded by mu
	grouped bool   // the last sync covered more than one frame; guarded by mu

	syncs atomic.Uint64 // fdatasyncs done, for tests

	// onRotate, if set, is called (without mu) when the log moves to a
	// new segment; it must not block.
	onRotate func()

	// start is the log's origin on the monotonic clock, for retryAt.
	start time.Time
	// unwritable is the last sync's error while no sync has succeeded
	// since; nil when the log is writable.
	unwritable atomic.Pointer[error]
	// broken is set when a failed sync could not be cut off: the log
	// refuses every write from then on.
	broken atomic.Pointer[error]
	// retryAt is when an unwritable log lets a new reservation try
	// again, in nanoseconds since start.
	retryAt atomic.Int64
	// freeBytes reports the room left on the log's filesystem; tests
	// replace it.
	freeBytes func() (int64, error)
	// gate admits new reservations while freeBytes reports the
	// headroom (Options.Headroom) free (see admit).
	gate *diskroom.Gate

	zmu   sync.Mutex
	zcond *sync.Cond // on zmu: a fill moved a segment's ready or ended
	fill  *fill      // the zero-fill running, if any; guarded by zmu
	// noFillUntil is when fills may start again after one stopped for
	// want of room, in nanoseconds since start; guarded by zmu.
	noFillUntil int64
	fills       sync.WaitGroup
	// slowFill, in tests, runs before each piece a fill writes, so that
	// frames catch up with the fill.
	slowFill func()
}

// retryEvery is how often an unwritable log lets a new reservation (or
// Store.Writable) try to write again, once its filesystem reports the
// headroom free: on a disk that has just a few bytes, a reservation would
// be recorded and its outcome not.
const retryEvery = 100 * time.Millisecond

// fill is a zero-fill of seg's file from from on.
type fill struct {
	seg  *segment
	from int64
}

func newLog(dir string, minSegment, maxSegment, headroom int64) *log {
	l := &log{dir: dir, minSegment: minSegment, maxSegment: maxSegment, segs: map[uint64]*segment{}, nextID: 1,
		cur: newBatch(), start: time.Now()}
	l.freeBytes = func() (int64, error) { return diskroom.FreeBytes(dir) }
	l.gate = diskroom.New(headroom, func() (int64, error) { return l.freeBytes() })
	l.zcond = sync.NewCond(&l.zmu)
	return l
}

// since is the time since the log's start on the monotonic clock.
func (l *log) since() int64 { return int64(time.Since(l.start)) }

// append adds frame to the active segment and returns the segment, the
// frame's offset in it and the batch to wait on for it to be durable.
func (l *log) append(frame []byte) (*segment, int64, *batch) {
	l.mu.Lock()
	seg := l.active
	off := seg.size
	seg.size += int64(len(frame))
	l.buf = append(l.buf, frame...)
	l.gate.Wrote(len(frame))
	l.frames++
	b := l.cur
	l.mu.Unlock()
	return seg, off, b
}

// wait returns once b's frames are durable, syncing them itself when no
// other writer is, or with the error that failed them.
func (l *log) wait(b *batch) error {
	yielded := false
	for {
		select {
		case <-b.done:
			return b.err
		default:
		}
		l.mu.Lock()
		if l.run != nil {
			done := l.run.done
			l.mu.Unlock()
			<-done
			continue
		}
		if b != l.cur {
			// Its sync ended between the check above and the lock.
			l.mu.Unlock()
			<-b.done
			return b.err
		}
		if l.grouped && !yielded {
			// The last sync covered more than one writer: others are
			// likely on their way. Let the goroutines ready to run append
			// first, so that this sync covers them too.
			yielded = true
			l.mu.Unlock()
			runtime.Gosched()
			continue
		}
		l.sync() // unlocks mu
	}
}

// sync writes the current batch and makes it durable, or fails it. mu is
// held; sync releases it while it writes, and returns with it released.
func (l *log) sync() {
	run, seg, buf := l.cur, l.active, l.buf
	l.cur, l.run = newBatch(), run
	start, end := seg.written, seg.size
	l.grouped = l.frames > 1
	l.frames = 0
	l.buf = l.spare[:0]
	rotated := seg.size >= seg.limit
	if rotated {
		// Rotate while holding mu: every frame appended from now on goes
		// to the new segment, and all of seg's frames are in buf.
		l.active = l.newSegment()
	}
	l.mu.Unlock()
	if rotated && l.onRotate != nil {
		l.onRotate()
	}

	var err error
	if p := l.broken.Load(); p != nil {
		err = *p
	} else {
		l.retryAt.Store(l.since() + int64(retryEvery))
		err = l.write(seg, buf)
	}

	l.mu.Lock()
	if err != nil {
		if l.broken.Load() == nil {
			l.rewind(seg, start, err)
		} else {
			l.dropPending(err)
		}
		l.unwritable.Store(&err)
	} else {
		seg.synced = end
		if l.unwritable.Load() != nil && l.roomAgain() {
			l.unwritable.Store(nil)
		}
	}
	l.spare = buf[:0]
	run.err = err
	close(run.done)
	l.run = nil
	l.mu.Unlock()
}

// write writes buf at the end of seg, creating seg's file first if it has
// none, and syncs it.
func (l *log) write(seg *segment, buf []byte) error {
	var err error
	if seg.f == nil {
		err = l.create(seg)
	}
	if err == nil {
		l.room(seg, seg.written+int64(len(buf)))
		_, err = seg.f.WriteAt(buf, seg.written)
	}
	if err == nil {
		seg.written += int64(len(buf))
		l.fillAhead(seg)
		err = fdatasync(seg.f)
		l.syncs.Add(1)
	}
	if err == nil && !seg.named {
		// The segment's name must be durable before any of its frames is
		// acknowledged.
		if err = syncDir(l.dir); err == nil {
			seg.named = true
		}
	}
	if err != nil {
		return writeError(err)
	}
	return nil
}

// writeError wraps a failed write of the log; a full disk matches
// store.ErrNoSpace as well as the system's error.
func writeError(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("file: write log: %w: %w", store.ErrNoSpace, err)
	}
	return fmt.Errorf("file: write log: %w", err)
}

// rewind undoes a failed sync of seg's frames from start on: it fails
// every frame appended since, which nobody has been told is durable, and
// cuts seg's file back to start, so that the next sync writes there and
// nothing of the failed frames is ever read. mu is held.
func (l *log) rewind(seg *segment, start int64, err error) {
	l.dropPending(err)
	seg.size, seg.written = start, start
	l.zmu.Lock()
	if seg.ready.Load() > start {
		seg.ready.Store(start)
	}
	l.zmu.Unlock()
	if seg.f == nil {
		return // never created: nothing was written
	}
	// Cut, not overwritten: the failed write may have put any part of
	// its frames on disk, and a shorter write at start would leave the
	// rest after it to be replayed. Truncating frees the room too.
	cut := seg.f.Truncate(start)
	if cut == nil {
		cut = fdatasync(seg.f)
	}
	if cut != nil {
		cut = fmt.Errorf("file: the log cannot cut a failed write off %s (%w) after: %w; writes are refused until the store is opened again", segmentName(seg.id), cut, err)
		l.broken.Store(&cut)
	}
}

// dropPending fails the frames appended since the running sync began:
// their offsets follow frames that were not written. mu is held.
func (l *log) dropPending(err error) {
	l.cur.err = err
	close(l.cur.done)
	l.cur = newBatch()
	l.buf = l.buf[:0]
	l.frames = 0
	l.active.size = l.active.written
}

// roomAgain reports whether a log that found its disk full may take new
// reservations again after a write succeeded: only once the filesystem
// has the headroom free. A small frame (a release, a reservation) fits in
// the last few kilobytes, and taking that for room would admit new work
// whose outcome cannot be recorded, and tell readiness the store writes.
func (l *log) roomAgain() bool {
	l.gate.Forget()
	return l.gate.Admit() == nil
}

// admit returns nil if a new reservation may write: the log is writable
// and its filesystem has the headroom free (a cached reading: see
// diskroom), or it is unwritable but due another try and has the
// headroom free again. Otherwise it returns why not: the error that made
// it unwritable, or the want of room, matching store.ErrNoSpace.
func (l *log) admit() error {
	if p := l.broken.Load(); p != nil {
		return *p
	}
	p := l.unwritable.Load()
	if p == nil {
		return l.gate.Admit()
	}
	now, at := l.since(), l.retryAt.Load()
	if now < at || !l.retryAt.CompareAndSwap(at, now+int64(retryEvery)) {
		return *p
	}
	l.gate.Forget()
	if l.gate.Admit() != nil {
		return *p
	}
	return nil
}

// room makes sure that no zero-fill writes where seg's frames up to end
// go: below ready, or below where the running fill starts; otherwise it
// waits for the fill to write the next piece or end.
func (l *log) room(seg *segment, end int64) {
	if end <= seg.ready.Load() {
		return
	}
	l.zmu.Lock()
	defer l.zmu.Unlock()
	for end > seg.ready.Load() {
		if f := l.fill; f == nil || f.seg != seg || end <= f.from {
			seg.ready.Store(end)
			return
		}
		l.zcond.Wait()
	}
}

// fillAhead starts writing zeros ahead of seg's frames when fewer than
// half of zeroAhead are left and no fill runs. Only the running sync calls
// it and room, so frames and zeros never overlap.
func (l *log) fillAhead(seg *segment) {
	if seg.ready.Load()-seg.written >= zeroAhead/2 {
		return
	}
	l.zmu.Lock()
	defer l.zmu.Unlock()
	if l.fill != nil || l.since() < l.noFillUntil {
		return
	}
	// ready is read again under zmu: a fill that ended since the read
	// above may have moved it, and frames may already go up to where it
	// is now without asking room; a fill from the older value would
	// write zeros over them.
	ready := seg.ready.Load()
	if ready-seg.written >= zeroAhead/2 {
		return
	}
	f := &fill{seg: seg, from: max(ready, seg.written+zeroGap)}
	if f.from >= seg.limit {
		// The log moves to a new segment before its frames get there.
		return
	}
	// Zeros past the limit would be disk the segment's frames never use.
	end := min(f.from+zeroAhead, seg.limit)
	l.fill = f
	l.fills.Add(1)
	go l.runFill(f, end)
}

// runFill writes f's zeros up to end, then ends f; a fill stopped by the
// want of room or an error pauses the next for fillPause.
func (l *log) runFill(f *fill, end int64) {
	defer l.fills.Done()
	pause := l.writeZeros(f.seg, f.from, end)
	l.zmu.Lock()
	l.fill = nil
	if pause {
		l.noFillUntil = l.since() + int64(fillPause)
	}
	l.zcond.Broadcast()
	l.zmu.Unlock()
}

// writeZeros writes and syncs zeros over seg from from to end, a piece at
// a time, moving seg's ready past each piece; it returns whether it
// stopped for the want of room or an error on writing.
func (l *log) writeZeros(seg *segment, from, end int64) (pause bool) {
	// A file of its own: Linux reports a failed writeback once to
	// each open file, so an fdatasync of the fill on the log's own
	// file could take the error of the frames' pages, and the sync
	// that follows would then succeed over lost frames. A failed
	// fill just stops: the sync then grows the file as it would
	// without one, and reports its own errors.
	zf, err := os.OpenFile(seg.path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer zf.Close()
	for off := from; off < end; off += zeroPiece {
		n := min(zeroPiece, end-off)
		if free, err := l.freeBytes(); err != nil || free < n+fillReserve {
			return true
		}
		if l.slowFill != nil {
			l.slowFill()
		}
		_, err := zf.WriteAt(zeros()[:n], off)
		if err == nil {
			err = fdatasync(zf)
		}
		if err != nil {
			// Give back what the piece took: no frame lies at or
			// past off while this fill runs (see room), and the
			// room may be what the next frame needs.
			_ = zf.Truncate(off)
			return true
		}
		l.zmu.Lock()
		seg.ready.Store(max(seg.ready.Load(), off+n))
		l.zcond.Broadcast()
		l.zmu.Unlock()
	}
	return false
}

// newSegment makes the next segment, in memory only: the sync that first
// writes to it creates its file (create). mu is held.
func (l *log) newSegment() *segment {
	id := l.nextID
	l.nextID++
	n := int64(len(segmentMagic))
	seg := &segment{id: id, path: filepath.Join(l.dir, segmentName(id)), size: n, synced: n, written: n,
		limit: l.rollSize()}
	seg.ready.Store(n)
	l.addSeg(seg)
	return seg
}

// liveShare: the log moves to a new segment past an eighth of its live
// data (within Options.MinSegmentBytes and SegmentBytes). The segment
// being written and the oldest, partly expired, cannot be reclaimed;
// segments of an eighth of the live data keep them within a quarter of
// it. The sweeps that come with each move then come about eight times a
// TTL, so few records that have expired still count as live.
const liveShare = 8

// rollSize returns the size past which the log moves on from a segment
// made now: an eighth of the live data, within the least and the largest
// segment. mu is held, or recovery runs.
func (l *log) rollSize() int64 {
	var live int64
	for _, s := range l.segs {
		live += s.live.Load()
	}
	return min(max(live/liveShare, l.minSegment), l.maxSegment)
}

// addSeg adds seg to the log's segments; mu is held, or recovery runs.
func (l *log) addSeg(seg *segment) {
	l.segs[seg.id] = seg
	l.byID.Store(uint32(seg.id), seg)
}

// segment returns the segment whose id is id, nil if it was dropped.
func (l *log) segment(id uint32) *segment {
	v, ok := l.byID.Load(id)
	if !ok {
		return nil
	}
	return v.(*segment)
}

// create creates seg's file with its header; the running sync calls it
// before writing seg's first frames.
func (l *log) create(seg *segment) error {
	f, err := os.OpenFile(seg.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(segmentMagic, 0); err != nil {
		f.Close()
		os.Remove(seg.path)
		return err
	}
	l.mu.Lock()
	seg.f = f
	l.mu.Unlock()
	return nil
}

// oldest returns the oldest segment other than the active one, with its
// file and size, or nil. A segment that a sync is still writing (the
// rotation away from it happens as the sync of its last frames begins)
// is returned once that sync ends: nothing may read or drop it before
// its frames are durable.
func (l *log) oldest() (*segment, *os.File, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		var old *segment
		for _, s := range l.segs {
			if s != l.active && (old == nil || s.id < old.id) {
				old = s
			}
		}
		if old == nil {
			return nil, nil, 0
		}
		if old.size == old.synced {
			return old, old.f, old.size
		}
		if l.run == nil {
			return nil, nil, 0
		}
		done := l.run.done
		l.mu.Unlock()
		<-done
		l.mu.Lock()
	}
}

// lastBatch returns the batch of the last frame appended, nil if every
// frame appended has been synced.
func (l *log) lastBatch() *batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		return l.cur
	}
	return l.run
}

// activeID returns the id of the segment being written.
func (l *log) activeID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active.id
}

// sizes returns the bytes of every segment on disk, its frames and the
// zeros written ahead of them, and the live bytes among them. The
// segment being written counts as its limit once zeros are to be written
// there (fillAhead): they come right after, and a reclaim that left them
// out would leave the log above its bound until the next.
func (l *log) sizes() (total, live int64) {
	total, live, _ = l.usage()
	return total, live
}

// usage returns sizes' two figures and the bytes of the sealed segments
// that no live record holds: what compacting them could take back at
// most. One pass, under mu once.
func (l *log) usage() (total, live, sealedDead int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		n, segLive := s.onDisk(), s.live.Load()
		if s != l.active {
			sealedDead += n - segLive
		} else if s.size+zeroGap < s.limit {
			n = max(n, s.limit)
		}
		total += n
		live += segLive
	}
	return total, live, sealedDead
}

// onDisk is the segment's bytes on disk: its frames, and the zeros
// written ahead of them. mu is held.
func (s *segment) onDisk() int64 { return max(s.size, s.ready.Load()) }

// drop deletes seg, which no index entry points to any more.
func (l *log) drop(seg *segment) error {
	l.mu.Lock()
	delete(l.segs, seg.id)
	l.byID.Delete(uint32(seg.id))
	f := seg.f
	l.mu.Unlock()
	if f == nil {
		return nil // never created
	}
	f.Close()
	if err := os.Remove(seg.path); err != nil {
		return err
	}
	return syncDir(l.dir)
}

func (l *log) close() error {
	l.fills.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, s := range l.segs {
		if s.f == nil {
			continue
		}
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
