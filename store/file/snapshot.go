package file

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// An index snapshot (a hint file, as Bitcask calls it) lets Open load the
// index instead of replaying the whole log: it reads the snapshot, then
// replays only the segments written since it began.
//
//	snapshot  "IDEMIDX\x01" | first uint64 | seq uint64 |
//	          segments uint32 | (id uint64, size uint64) each |
//	          entries uint64 | entry (41 bytes) each |
//	          crc32c(header) uint32 | crc32c(entries) uint32
//	entry     stripe byte | tag [11]byte | state byte | segment uint32 |
//	          expires int64 | lease-until int64 | offset uint32 | size uint32
//
// first is the segment that was active when the snapshot began. Every
// frame written after that lies in first or a later segment, and replay
// reads those whole; the earlier segments were sealed, and the snapshot
// lists their sizes, so Open neither reads nor scans them. The snapshot
// is taken while the store runs: a stripe at a time, under its lock (so
// every entry it holds is durable), and only of entries whose frames lie
// before first; a key written since lies in the replayed segments and
// its frame there wins, whatever the snapshot says.
//
// An entry whose segment is gone when Open reads the snapshot belonged to
// a key expired, released or moved since: a segment is dropped only once
// no entry points into it, and a move or a release leaves a frame in the
// replayed segments.
//
// The snapshot is written to a temporary file, synced, and renamed over
// the last one, the directory synced after: a crash leaves the old one or
// the new one whole. One that does not check (a torn or foreign file, a
// checksum that fails, a segment that does not match) is ignored, and
// Open replays the whole log, as without a snapshot.
const (
	snapshotFile = "index.snap"
	snapshotTemp = "index.snap.tmp"
	snapEntry    = 41
)

var snapshotMagic = []byte("IDEMIDX\x01")

// rotated runs, in the background, what the log's rotation to a new
// segment calls for, at the pace of the writes rather than of Cleanup
// (the gateway's runs every few minutes): it removes the records expired
// by now, drops the oldest segments no record lives in, and compacts
// while the log holds more than 1.6 times its live data (as Cleanup does,
// unless one runs; the compaction of segments that are
// merely mostly dead is left to Cleanup), so that disk follows the live
// data whatever the cleanup interval; then it writes a snapshot if one is due
// (snapshotDue), so that a restart after a crash, which has no snapshot
// from Close, reads about one snapshot's worth of log at most. One runs
// at a time (maintain); it holds closeMu's read lock, so Close waits for
// it, and none starts after.
func (s *Store) rotated() {
	s.rotatedAgain.Store(true)
	if s.snapRunning.CompareAndSwap(false, true) {
		go s.maintain()
	}
}

// maintain does the work of the rotations since it last ran, until none
// is left; snapRunning is set. A rotation while it runs makes it run once
// more, so that none is missed, and none is done twice at once.
func (s *Store) maintain() {
	for {
		for s.rotatedAgain.Swap(false) {
			if !s.afterRotation() {
				break // closing
			}
		}
		s.snapRunning.Store(false)
		if !s.rotatedAgain.Load() || !s.snapRunning.CompareAndSwap(false, true) {
			return
		}
	}
}

// afterRotation sweeps, reclaims and writes a snapshot if one is due (see
// rotated); it returns false if the store is closing.
func (s *Store) afterRotation() bool {
	if !s.closeMu.TryRLock() {
		return false
	}
	defer s.closeMu.RUnlock()
	if s.closed {
		return false
	}
	if !s.cleanupOnly && s.cleanMu.TryLock() {
		ctx := context.Background()
		n, err := s.sweep(ctx, s.clock.Now(), 0)
		s.swept.Add(int64(n))
		if err == nil {
			err = s.reclaim(ctx, false)
		}
		s.cleanMu.Unlock()
		if err != nil {
			s.logger.Warn("file: reclaiming the log on its rotation failed; the next Cleanup tries again", "err", err)
		}
	}
	if s.snapshotDue() {
		if err := s.snapshot(); err != nil {
			s.logger.Warn("file: index snapshot failed; the last one stands", "err", err)
		}
	}
	return true
}

// snapshot writes an index snapshot; snapMu serializes it.
func (s *Store) snapshot() error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.log.broken.Load() != nil {
		return nil // the log's tail is not known: nothing to describe
	}
	s.log.mu.Lock()
	first := s.log.active.id
	s.log.mu.Unlock()

	tmp := filepath.Join(s.log.dir, snapshotTemp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	crc := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
	// The sealed segments' sizes are final: no frame goes to them again.
	segs := s.sealed(first)
	if segs == nil {
		return nil // a sync of a sealed segment still runs: next time
	}
	head := snapshotHeader(first, s.seq.Load(), segs)
	if _, err := f.Write(head); err != nil {
		return err
	}
	n, err := s.writeSnapEntries(w, first)
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := finishSnapshot(f, head, n, crc.Sum32()); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	if err := os.Rename(tmp, filepath.Join(s.log.dir, snapshotFile)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := syncDir(s.log.dir); err != nil {
		return err
	}
	s.snapFirst.Store(first)
	return nil
}

// snapshotHeader returns a snapshot's header for the sealed segments segs,
// its entry count (its last 8 bytes) zero: the count is known at the end,
// and finishSnapshot writes it over then.
func snapshotHeader(first, seq uint64, segs []*segment) []byte {
	var b []byte
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint64(b, first)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(len(segs)))
	for _, sg := range segs {
		b = binary.BigEndian.AppendUint64(b, sg.id)
		b = binary.BigEndian.AppendUint64(b, uint64(sg.size))
	}
	return binary.BigEndian.AppendUint64(b, 0)
}

// writeSnapEntries writes to w the entries whose frames lie before first,
// a stripe at a time under its lock, and returns how many it wrote. The
// lock is let go while a full buffer is written.
func (s *Store) writeSnapEntries(w io.Writer, first uint64) (uint64, error) {
	var n uint64
	buf := make([]byte, 0, 64<<10)
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		// Only durable entries go in a snapshot: not one whose frame is
		// kept in memory, which a replay finds if it is written later.
		s.settleWritten(st)
		for slot := range st.slots {
			e := st.at(slot)
			if e.state == stateFree || e.seg == inMemory || uint64(e.seg) >= first {
				continue
			}
			buf = append(buf, byte(i))
			buf = append(buf, e.tag[:]...)
			buf = append(buf, e.state)
			buf = binary.BigEndian.AppendUint32(buf, e.seg)
			buf = binary.BigEndian.AppendUint64(buf, uint64(e.exp))
			buf = binary.BigEndian.AppendUint64(buf, uint64(e.lease))
			buf = binary.BigEndian.AppendUint32(buf, e.off)
			buf = binary.BigEndian.AppendUint32(buf, e.size)
			n++
			if len(buf) >= 60<<10 {
				st.mu.Unlock()
				if _, err := w.Write(buf); err != nil {
					return n, err
				}
				buf = buf[:0]
				st.mu.Lock()
			}
		}
		st.mu.Unlock()
	}
	_, err := w.Write(buf)
	return n, err
}

// finishSnapshot writes the entry count n into head, head over the start of
// f, and the two checksums at f's end, then syncs f. The checksums are the
// header's, taken once its count is in, and the entries' (entriesCRC),
// taken as they were written.
func finishSnapshot(f *os.File, head []byte, n uint64, entriesCRC uint32) error {
	binary.BigEndian.PutUint64(head[len(head)-8:], n)
	if _, err := f.WriteAt(head, 0); err != nil {
		return err
	}
	var tail []byte
	tail = binary.BigEndian.AppendUint32(tail, crc32.Checksum(head, castagnoli))
	tail = binary.BigEndian.AppendUint32(tail, entriesCRC)
	if _, err := f.Write(tail); err != nil {
		return err
	}
	return fdatasync(f)
}

// sealed returns the segments before first, none of which a sync still
// writes, or nil if one is still being written.
func (s *Store) sealed(first uint64) []*segment {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	out := []*segment{}
	for id, sg := range s.log.segs {
		if id >= first {
			continue
		}
		if sg.size != sg.synced {
			return nil
		}
		out = append(out, sg)
	}
	return out
}

// errBadSnapshot is why a snapshot was ignored.
var errBadSnapshot = errors.New("the index snapshot does not check")

// loadSnapshot loads the directory's snapshot into the index and the
// log's sealed segments, and returns the first segment to replay; with
// none, or one that does not check, it leaves the index empty and returns
// 0 (replay everything). ids are the directory's segments.
func (s *Store) loadSnapshot(ids []uint64) uint64 {
	first, err := s.readSnapshot(ids)
	if err == nil {
		return first
	}
	if !errors.Is(err, os.ErrNotExist) {
		s.logger.Warn("file: ignoring the index snapshot; replaying the whole log", "err", err)
	}
	// Undo what was loaded.
	for i := range s.stripes {
		n := s.stripes[i].n
		s.stripes[i] = stripe{n: n}
	}
	for id, sg := range s.log.segs {
		if sg.f != nil {
			sg.f.Close()
		}
		delete(s.log.segs, id)
		s.log.byID.Delete(uint32(id))
	}
	s.seq.Store(0)
	return 0
}

// snapshotFirst returns the first segment that the directory's snapshot
// leaves to replay, as its header says, or 0 without a readable one.
// Nothing is checked: loadSnapshot does that.
func snapshotFirst(dir string) uint64 {
	f, err := os.Open(filepath.Join(dir, snapshotFile))
	if err != nil {
		return 0
	}
	defer f.Close()
	var b [16]byte
	if _, err := io.ReadFull(f, b[:]); err != nil || string(b[:8]) != string(snapshotMagic) {
		return 0
	}
	return binary.BigEndian.Uint64(b[8:])
}

// snapReader reads a snapshot, checksumming what it reads.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	err error
}

// read returns the next n bytes; after a failed read, which r.err keeps,
// it returns zeros.
func (r *snapReader) read(n int) []byte {
	if r.err != nil {
		return make([]byte, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.err = fmt.Errorf("%w: %v", errBadSnapshot, err)
		return b
	}
	r.crc.Write(b)
	return b
}

// readSnapshot loads the directory's snapshot into the index and the
// log's sealed segments (ids are the directory's segments), and returns
// the first segment to replay. An error that is not os.ErrNotExist says
// why the snapshot does not check; what it loaded is then left for
// loadSnapshot to undo.
func (s *Store) readSnapshot(ids []uint64) (uint64, error) {
	f, err := os.Open(filepath.Join(s.log.dir, snapshotFile))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := time.Now()
	r := &snapReader{r: bufio.NewReaderSize(f, 1<<20), crc: crc32.New(castagnoli)}
	h, err := readSnapHeader(r)
	if err != nil {
		return 0, err
	}
	if err := s.openSealed(ids, h.first, h.sizes); err != nil {
		return 0, err
	}
	if h.n > 1<<40 {
		return 0, fmt.Errorf("%w: bad entry count", errBadSnapshot)
	}
	held, err := s.readSnapEntries(r, h.n, h.first)
	if err != nil {
		return 0, err
	}
	if err := checkSnapTail(r, h.crc); err != nil {
		return 0, err
	}
	// A record left in progress: its holder died; its lease is held to
	// its length from this Open, read from its frame.
	for _, rs := range held {
		for _, r := range rs {
			i, slot := unref(r)
			if err := s.boundLease(s.stripes[i].at(slot)); err != nil {
				return 0, err
			}
		}
	}
	s.seq.Store(h.seq)
	s.snapFirst.Store(h.first)
	s.logger.Info("file: loaded the index snapshot", "records", h.n, "took", time.Since(start))
	return h.first, nil
}

// A snapHeader is what a snapshot's header says: the first segment to
// replay, the seq, the sealed segments' sizes by id and the entry count,
// with the header's checksum as read.
type snapHeader struct {
	first, seq, n uint64
	sizes         map[uint64]int64
	crc           uint32
}

// readSnapHeader reads a snapshot's header, leaving r's checksum reset for
// the entries.
func readSnapHeader(r *snapReader) (snapHeader, error) {
	if string(r.read(len(snapshotMagic))) != string(snapshotMagic) {
		return snapHeader{}, fmt.Errorf("%w: not a snapshot", errBadSnapshot)
	}
	head := r.read(20)
	h := snapHeader{first: binary.BigEndian.Uint64(head), seq: binary.BigEndian.Uint64(head[8:])}
	nsegs := int(binary.BigEndian.Uint32(head[16:]))
	if r.err != nil || nsegs > 1<<24 {
		return snapHeader{}, fmt.Errorf("%w: bad header", errBadSnapshot)
	}
	h.sizes = make(map[uint64]int64, nsegs)
	for range nsegs {
		b := r.read(16)
		h.sizes[binary.BigEndian.Uint64(b)] = int64(binary.BigEndian.Uint64(b[8:]))
	}
	h.n = binary.BigEndian.Uint64(r.read(8))
	if r.err != nil {
		return snapHeader{}, r.err
	}
	h.crc = r.crc.Sum32()
	r.crc.Reset()
	return h, nil
}

// openSealed opens the directory's segments before first as the log's
// sealed segments, of the sizes the snapshot lists. Every one must be one
// it lists (one it lists may be gone: dropped since), at least as long as
// it says.
func (s *Store) openSealed(ids []uint64, first uint64, sizes map[uint64]int64) error {
	for _, id := range ids {
		if id >= first {
			continue
		}
		size, ok := sizes[id]
		if !ok {
			return fmt.Errorf("%w: segment %s is not in it", errBadSnapshot, segmentName(id))
		}
		path := filepath.Join(s.log.dir, segmentName(id))
		sf, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		seg := &segment{id: id, path: path, f: sf, named: true}
		seg.setLength(size)
		s.log.addSeg(seg)
		if fi, err := sf.Stat(); err != nil || fi.Size() < size {
			return fmt.Errorf("%w: segment %s is shorter than it says", errBadSnapshot, segmentName(id))
		}
	}
	return nil
}

// A snapBlock is a block of a snapshot's entries, handed to every worker.
type snapBlock struct {
	b    []byte
	left atomic.Int32 // workers yet to read it
}

// A snapLoad is the worker pool that inserts a snapshot's entries: each
// worker inserts the entries of its own stripes (recoverWorkers), so that
// no stripe is shared.
type snapLoad struct {
	work []chan *snapBlock
	free chan []byte // the blocks' buffers, back from the workers
	errs []error
	held [][]uint32 // each worker's records left in progress
	wg   sync.WaitGroup
}

// readSnapEntries reads the snapshot's n entries, whose frames lie before
// first, into the index, and returns each worker's records left in
// progress. Blocks of entries are read, and checksummed, here, one copy
// and one checksum call per block.
func (s *Store) readSnapEntries(r *snapReader, n, first uint64) ([][]uint32, error) {
	l := s.startSnapLoad(int(n/stripes)+1, first)
	var readErr error
	for left := n; left > 0; {
		k := min(left, uint64(snapBlockLen))
		block := (<-l.free)[:k*snapEntry]
		if _, err := io.ReadFull(r.r, block); err != nil {
			readErr = fmt.Errorf("%w: %v", errBadSnapshot, err)
			break
		}
		r.crc.Write(block)
		left -= k
		blk := &snapBlock{b: block}
		blk.left.Store(int32(recoverWorkers))
		for _, c := range l.work {
			c <- blk
		}
	}
	for _, c := range l.work {
		close(c)
	}
	l.wg.Wait()
	if readErr != nil {
		return nil, readErr
	}
	for _, err := range l.errs {
		if err != nil {
			return nil, err
		}
	}
	return l.held, nil
}

// startSnapLoad starts the workers that insert a snapshot's entries, each
// stripe sized for per entries first.
func (s *Store) startSnapLoad(per int, first uint64) *snapLoad {
	l := &snapLoad{
		work: make([]chan *snapBlock, recoverWorkers),
		free: make(chan []byte, recoverWorkers*4+2),
		errs: make([]error, recoverWorkers),
		held: make([][]uint32, recoverWorkers),
	}
	for w := range l.work {
		l.work[w] = make(chan *snapBlock, 4)
	}
	for range cap(l.free) {
		l.free <- make([]byte, 0, (256<<10)/snapEntry*snapEntry)
	}
	for w := range recoverWorkers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; i < stripes; i += recoverWorkers {
				s.stripes[i].reserve(per + per/8)
			}
			for blk := range l.work[w] {
				if l.errs[w] == nil {
					l.held[w], l.errs[w] = s.loadEntries(blk.b, w, first, l.held[w])
				}
				if blk.left.Add(-1) == 0 {
					l.free <- blk.b
				}
			}
		}()
	}
	return l
}

// checkSnapTail checks the snapshot's two checksums, the header's (headCRC
// as read) and the entries', and that nothing follows them.
func checkSnapTail(r *snapReader, headCRC uint32) error {
	entriesCRC := r.crc.Sum32()
	var tail [8]byte
	if _, err := io.ReadFull(r.r, tail[:]); err != nil {
		return fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	if binary.BigEndian.Uint32(tail[:]) != headCRC || binary.BigEndian.Uint32(tail[4:]) != entriesCRC {
		return fmt.Errorf("%w: checksum mismatch", errBadSnapshot)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: trailing bytes", errBadSnapshot)
	}
	return nil
}

// snapBlockLen is how many entries a block of a snapshot's holds.
const snapBlockLen = (256 << 10) / snapEntry

// loadEntries inserts the entries of block that lie in worker w's
// stripes into the index, appending the references of those left in
// progress to held.
func (s *Store) loadEntries(block []byte, w int, first uint64, held []uint32) ([]uint32, error) {
	// The last entry's segment, as a rule the next one's too.
	lastSeg, lastGone := uint32(0), true
	for b := block; len(b) > 0; b = b[snapEntry:] {
		if int(b[0])%recoverWorkers != w {
			continue
		}
		e := entry{state: b[12], seg: binary.BigEndian.Uint32(b[13:]),
			exp: int64(binary.BigEndian.Uint64(b[17:])), lease: int64(binary.BigEndian.Uint64(b[25:])),
			off: binary.BigEndian.Uint32(b[33:]), size: binary.BigEndian.Uint32(b[37:])}
		copy(e.tag[:], b[1:12])
		if e.state == stateFree || e.state >= stateDeleted || uint64(e.seg) >= first {
			return held, fmt.Errorf("%w: a bad entry", errBadSnapshot)
		}
		if e.seg != lastSeg {
			lastSeg, lastGone = e.seg, s.log.segment(e.seg) == nil
		}
		if lastGone {
			continue // its segment was dropped: the record is gone
		}
		st := &s.stripes[b[0]]
		slot, ok := st.insertNew(e)
		if !ok {
			return held, fmt.Errorf("%w: an entry twice", errBadSnapshot)
		}
		if e.state == 1 {
			held = append(held, ref(int(b[0]), slot))
		}
	}
	return held, nil
}

// boundLease holds e's lease, in progress at Open, to its length from
// the Open, reading the length from e's frame.
func (s *Store) boundLease(e *entry) error {
	buf := make([]byte, e.size)
	if _, err := s.log.segment(e.seg).f.ReadAt(buf, int64(e.off)); err != nil {
		return fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	m, err := decodeMeta(buf[frameHeader:])
	if err != nil || tagOf(&m.id) != e.tag {
		return fmt.Errorf("%w: an entry's frame does not match it", errBadSnapshot)
	}
	if bound := nanos(s.opened.Add(max(m.dur, 0))); e.lease > bound {
		e.lease = bound
	}
	return nil
}
