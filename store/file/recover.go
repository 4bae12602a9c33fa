package file

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// recover rebuilds the index by replaying every segment, oldest first:
// for each key, the entry with the highest seq wins, wherever it lies. A
// frame cut short or failing its checksum can only be the tail of the
// last write that was not acknowledged (every acknowledged frame was
// fsync'd with all frames before it): the log is truncated there. Damage
// anywhere else is ErrCorrupt, never silently skipped.
//
// A record left in progress belongs to a holder that is gone with the
// process that wrote it, but its LeaseUntil is on that process's clock,
// and the wall clock read at this Open may be behind it (an NTP step back,
// a restored VM). Its lease is held to at most its length from the
// reopen, so the key is free again within one lease whatever the clock
// did. Nothing is written: each Open applies the same bound.
//
// Recovery writes nothing but the cut of a torn tail, which frees room,
// so a store opens on a full disk and serves what it holds.
func (s *Store) recover() error {
	if err := refuseOtherFormats(s.log.dir); err != nil {
		return err
	}
	ids, err := segmentIDs(s.log.dir)
	if err != nil {
		return err
	}
	// The segments the snapshot does not cover are read and decoded on
	// their own goroutine while the snapshot loads; should it not load,
	// the others are decoded then. Either way the index takes them oldest
	// first.
	segs := make([]*decoded, len(ids))
	for i := range segs {
		segs[i] = &decoded{id: ids[i], done: make(chan struct{})}
	}
	peek := snapshotFirst(s.log.dir)
	from := firstAtLeast(ids, peek)
	s.decodeAll(segs[from:])
	first := s.loadSnapshot(ids)
	if first != peek {
		// The snapshot did not load (or changed under us): every segment
		// is replayed.
		s.decodeAll(segs[:from])
		from = 0
	}
	segs = segs[from:]
	s.log.nextID = max(s.log.nextID, first)
	if len(ids) > 0 {
		s.log.nextID = max(s.log.nextID, ids[len(ids)-1]+1)
	}
	last, err := s.addDecoded(segs, s.applyAll(segs))
	if err != nil {
		return err
	}
	s.settle()
	if last != nil {
		last.limit = s.log.rollSize()
	}
	if last == nil || last.size >= last.limit {
		last = s.log.newSegment() // its file comes with its first write
	}
	s.log.active = last
	if n := s.count(); n > 0 {
		s.logger.Info("file: recovered the log", "records", n, "segments", len(segs))
	}
	return nil
}

// addDecoded waits for the replayed segments to be decoded and adds them
// to the log, the seq to the highest they hold, and returns the last one
// added. With an error, err (applyAll's) or a segment's, it closes the
// files of those it did not add and returns the first error.
func (s *Store) addDecoded(segs []*decoded, err error) (*segment, error) {
	var last *segment
	for _, d := range segs {
		<-d.done
		if d.err != nil {
			if err == nil {
				err = d.err
			}
			continue
		}
		if d.seg == nil {
			continue // a segment cut before its header was written: removed
		}
		s.log.addSeg(d.seg)
		last = d.seg
		if d.seq > s.seq.Load() {
			s.seq.Store(d.seq)
		}
	}
	if err != nil {
		for _, d := range segs {
			if d.seg != nil && d.seg.f != nil && s.log.segment(uint32(d.id)) != d.seg {
				d.seg.f.Close()
			}
		}
		return nil, err
	}
	return last, nil
}

// firstAtLeast returns the index of the first of ids (sorted) that is at
// least id.
func firstAtLeast(ids []uint64, id uint64) int {
	i, _ := slices.BinarySearch(ids, id)
	return i
}

// decoded is a segment read and decoded for replay: done is closed once
// seg (nil for a segment removed as cut before its header), recs, seq
// and err are set.
type decoded struct {
	id   uint64
	done chan struct{}
	seg  *segment
	recs []frameRec
	seq  uint64 // the highest seq among its frames
	err  error
}

// frameRec is what replay takes from a frame into the index.
type frameRec struct {
	key   [12]byte // the key hash's first 12 bytes: its stripe and tag
	state uint8    // stateDeleted for a delete
	seq   uint64
	exp   int64
	lease int64 // already held to the lease's length from this Open
	off   uint32
	size  uint32
}

// recoverWorkers is how many goroutines recovery spreads the index's
// stripes over: stripe i is worker i%recoverWorkers's alone.
var recoverWorkers = min(max(runtime.GOMAXPROCS(0), 1), 8)

// parallel runs fn(w) for each worker w and waits for them.
func parallel(fn func(w int)) {
	var wg sync.WaitGroup
	for w := range recoverWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w)
		}()
	}
	wg.Wait()
}

// decodeAll decodes segs on parallel's workers, recoverWorkers segments
// at a time, each taken in order (applyAll takes them oldest first,
// whatever order they finish in). Only the tail of the log may be
// torn: the last segment that holds more than its header (a crash while
// rotating leaves a new, empty segment after a torn one). A segment is
// cut only once every segment before it has decoded: after one fails,
// Open fails, and nothing after it is changed.
func (s *Store) decodeAll(segs []*decoded) {
	if len(segs) == 0 {
		return
	}
	go func() {
		tail := len(segs) - 1
		var err error
		for ; tail > 0 && err == nil; tail-- {
			var has bool
			if has, err = hasFrames(filepath.Join(s.log.dir, segmentName(segs[tail].id))); has {
				break
			}
		}
		if err != nil {
			for _, d := range segs {
				d.err = err
				close(d.done)
			}
			return
		}
		var next atomic.Int64
		parallel(func(int) {
			var buf []byte
			for {
				i := int(next.Add(1)) - 1
				if i >= len(segs) {
					return
				}
				d := segs[i]
				// A later segment is read only if every one before it
				// decodes, as Open fails otherwise.
				before := func() error {
					for _, p := range segs[:i] {
						if <-p.done; p.err != nil {
							return p.err
						}
					}
					return nil
				}
				d.seg, d.err = s.decode(d, i >= tail, before, &buf)
				close(d.done)
			}
		})
	}()
}

// applyAll makes each frame of segs, oldest segment first, its key's
// entry unless a frame of the key with a higher seq was applied before
// (apply), each worker its own stripes. It returns the first segment's
// error, if one failed.
func (s *Store) applyAll(segs []*decoded) error {
	for i := range s.stripes {
		s.stripes[i].seqBase = s.stripes[i].slots
	}
	parallel(func(w int) {
		for _, d := range segs {
			<-d.done
			if d.err != nil {
				return
			}
			for i := range d.recs {
				if r := &d.recs[i]; int(r.key[0])%recoverWorkers == w {
					s.apply(r, uint32(d.id))
				}
			}
		}
	})
	for _, d := range segs {
		if d.err != nil {
			return d.err
		}
		d.recs = nil
	}
	return nil
}

// settle ends a replay: the entries of released keys leave the index,
// and every other entry counts its frame's bytes in its segment and gets
// its expiry item.
func (s *Store) settle() {
	parallel(func(w int) {
		live := map[uint32]int64{}
		items := s.expiryBuckets(w)
		for i := w; i < stripes; i += recoverWorkers {
			st := &s.stripes[i]
			// Entries come in the order they were written, as a rule:
			// the last entry's segment and second are the next one's too.
			var seg *segment
			var segLive int64
			sec, inSec := int64(noTime), []uint32(nil)
			for slot := range st.slots {
				e := st.at(slot)
				if e.state == stateFree {
					continue
				}
				if seg == nil || uint32(seg.id) != e.seg {
					if seg != nil {
						live[uint32(seg.id)] += segLive
					}
					seg, segLive = s.log.segment(e.seg), 0
				}
				if e.state == stateDeleted || seg == nil {
					st.remove(slot)
					continue
				}
				segLive += int64(e.size)
				if es := expSec(e.exp); es != sec {
					if inSec != nil {
						items[sec] = inSec
					}
					sec, inSec = es, items[es]
				}
				inSec = append(inSec, ref(i, slot))
			}
			if seg != nil {
				live[uint32(seg.id)] += segLive
			}
			if inSec != nil {
				items[sec] = inSec
			}
			st.seqs, st.seqOld = nil, nil
		}
		s.exp.addMany(items)
		for id, n := range live {
			s.log.segment(id).live.Add(n)
		}
	})
}

// expiryBuckets returns, for worker w's stripes, an empty bucket of
// expiry items for each second their entries expire in, with room for
// all of them: grown by append instead, each bucket is copied over and
// over as every stripe adds its share.
func (s *Store) expiryBuckets(w int) map[int64][]uint32 {
	counts := map[int64]int{}
	for i := w; i < stripes; i += recoverWorkers {
		st := &s.stripes[i]
		sec, n := int64(noTime), 0
		for slot := range st.slots {
			e := st.at(slot)
			if e.state == stateFree || e.state == stateDeleted {
				continue
			}
			if es := expSec(e.exp); es != sec {
				if n > 0 {
					counts[sec] += n
				}
				sec, n = es, 0
			}
			n++
		}
		if n > 0 {
			counts[sec] += n
		}
	}
	items := make(map[int64][]uint32, len(counts))
	for sec, n := range counts {
		items[sec] = make([]uint32, 0, n)
	}
	return items
}

func (s *Store) count() int {
	n := 0
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		n += st.used
		st.mu.Unlock()
	}
	return n
}

// apply makes r, a frame of segment seg, its key's entry if no frame of
// the key with a higher seq was replayed. A delete leaves a deleted entry
// until settle, so that an older put replayed after it (in an older
// segment's copy) does not bring the key back. Only r's stripe's worker
// calls it.
func (s *Store) apply(r *frameRec, seg uint32) {
	st := &s.stripes[r.key[0]]
	e := entry{state: r.state, exp: r.exp, lease: r.lease, seg: seg, off: r.off, size: r.size}
	copy(e.tag[:], r.key[1:12])
	slot, added := st.insertNew(e)
	if !added {
		if r.seq <= st.seqOf(slot) {
			return
		}
		*st.at(slot) = e
	}
	st.setSeq(slot, r.seq)
}

// seqOf returns the seq of slot's entry: 0 for one loaded from the
// snapshot, older than any frame.
func (st *stripe) seqOf(slot uint32) uint64 {
	if slot < st.seqBase {
		return st.seqOld[slot]
	}
	if i := int(slot - st.seqBase); i < len(st.seqs) {
		return st.seqs[i]
	}
	return 0
}

// setSeq sets slot's seq (see stripe.seqs).
func (st *stripe) setSeq(slot uint32, seq uint64) {
	if slot < st.seqBase {
		if st.seqOld == nil {
			st.seqOld = map[uint32]uint64{}
		}
		st.seqOld[slot] = seq
		return
	}
	i := int(slot - st.seqBase)
	if n := i + 1; n > len(st.seqs) {
		st.seqs = append(st.seqs, make([]uint64, n-len(st.seqs))...)
	}
	st.seqs[i] = seq
}

// decode reads segment d.id and decodes its frames into d.recs and d.seq.
// The last segment is the only one whose tail may be torn: it is cut
// there, once before reports that the segments before it decoded.
func (s *Store) decode(d *decoded, last bool, before func() error, buf *[]byte) (*segment, error) {
	id := d.id
	path := filepath.Join(s.log.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	// Read into the buffer of the segment before: decoding keeps nothing
	// of it, and fresh memory would cost a page fault every 4 KiB.
	data, err := readAll(f, buf)
	if err != nil {
		f.Close()
		return nil, err
	}
	seg := &segment{id: id, path: path, f: f, named: true}
	if len(data) < len(segmentMagic) {
		return s.torn(seg, last, before, 0, "short header")
	}
	if allZero(data[:len(segmentMagic)]) {
		// Allocated, then cut before its header was written.
		return s.torn(seg, last, before, 0, "no header")
	}
	if !bytes.Equal(data[:len(segmentMagic)], segmentMagic) {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not an idem log segment", ErrCorrupt, segmentName(id))
	}
	off, why, err := s.decodeFrames(d, data)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("segment %s at byte %d: %w", segmentName(id), off, err)
	}
	if why != "" {
		return s.torn(seg, last, before, off, why)
	}
	// The zeros after off may be fallocated space, not written zeros: the
	// next fill writes them again.
	seg.setLength(int64(off))
	return seg, nil
}

// decodeFrames decodes the frames of a segment's data after its header
// into d.recs and d.seq. It returns where they end, with why if a frame
// there is torn (cut short, or failing its checksum), or the error of a
// frame that checks but does not decode.
func (s *Store) decodeFrames(d *decoded, data []byte) (off int, why string, err error) {
	// About 300 bytes a frame, as the gateway's records go.
	d.recs = make([]frameRec, 0, len(data)/256)
	off = len(segmentMagic)
	for off < len(data) {
		if allZero(data[off:min(off+frameHeader, len(data))]) {
			// Allocated space never written: the segment ends here, if
			// nothing follows.
			if allZero(data[off:]) {
				break
			}
			return off, "frames after a gap", nil
		}
		if len(data)-off < frameHeader {
			return off, "short frame header", nil
		}
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n > maxBody || len(data)-off-frameHeader < n {
			return off, "short frame", nil
		}
		body := data[off+frameHeader : off+frameHeader+n]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[off+4:]) {
			return off, "checksum mismatch", nil
		}
		m, err := decodeMeta(body)
		if err != nil {
			return off, "", err
		}
		d.seq = max(d.seq, m.seq)
		if m.kind == kindDel && m.id == (keyID{}) {
			// Store.Writable's no-op frame.
		} else {
			d.recs = append(d.recs, s.replayRec(&m, off, frameHeader+n))
		}
		off += frameHeader + n
	}
	return off, "", nil
}

// replayRec returns what replay keeps of frame m, size bytes at off.
func (s *Store) replayRec(m *meta, off, size int) frameRec {
	r := frameRec{state: m.state, seq: m.seq, exp: m.exp, lease: m.lease, off: uint32(off), size: uint32(size)}
	copy(r.key[:], m.id[:12])
	if m.kind == kindDel {
		r.state = stateDeleted
	} else if m.state == 1 {
		// The holder died with the process that wrote it.
		if bound := nanos(s.opened.Add(max(m.dur, 0))); r.lease > bound {
			r.lease = bound
		}
	}
	return r
}

// torn handles seg's frames torn at off (why says how): in the last
// segment (last) they are the unacknowledged tail of the log, cut there
// once before reports that the segments before decoded; anywhere else
// they are ErrCorrupt. seg's file is closed unless seg is returned.
func (s *Store) torn(seg *segment, last bool, before func() error, off int, why string) (*segment, error) {
	f := seg.f
	if !last {
		f.Close()
		return nil, fmt.Errorf("%w: segment %s at byte %d: %s", ErrCorrupt, segmentName(seg.id), off, why)
	}
	if err := before(); err != nil {
		f.Close()
		return nil, err
	}
	s.logger.Info("file: dropping the unacknowledged tail of the log", "segment", segmentName(seg.id), "at", off, "why", why)
	if off < len(segmentMagic) {
		// Cut while being created: it holds nothing. Removed rather
		// than written again, which could need room the disk lacks.
		f.Close()
		if err := os.Remove(seg.path); err != nil {
			return nil, err
		}
		return nil, syncDir(s.log.dir)
	}
	// Truncated, not overwritten: the bytes after the cut may hold
	// whole frames of the unacknowledged write (pages reach the disk
	// in any order), which must never be read as data later.
	if err := f.Truncate(int64(off)); err != nil {
		f.Close()
		return nil, err
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return nil, err
	}
	seg.setLength(int64(off))
	return seg, nil
}

// setLength sets the length of a segment read from disk, all of it
// written, synced and free of zero-fill.
func (seg *segment) setLength(n int64) {
	seg.size, seg.synced, seg.written = n, n, n
	seg.ready.Store(n)
}

// readAll reads f whole into *buf, growing it if need be, and returns
// what it read.
func readAll(f *os.File, buf *[]byte) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := int(fi.Size())
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	k, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return b[:k], nil
}

// hasFrames reports whether the segment at path holds a frame after its
// header.
func hasFrames(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var b [16]byte
	n, err := io.ReadFull(f, b[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	return n > len(segmentMagic) && !allZero(b[len(segmentMagic):n]), nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// segmentIDs lists the directory's segments, oldest first.
func segmentIDs(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".log")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// ErrOtherFormat is returned by Open for a directory written by the
// Pebble-based store of earlier versions.
var ErrOtherFormat = errors.New("the directory holds a store of another format")

func refuseOtherFormats(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "MANIFEST-") || strings.HasPrefix(de.Name(), "OPTIONS-") {
			return fmt.Errorf("%w: it is a Pebble store (open it with pebble:%s, or start this store in a new directory)", ErrOtherFormat, dir)
		}
	}
	return nil
}
