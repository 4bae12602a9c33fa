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
	"slices"
	"strconv"
	"strings"
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
	// The snapshot covers the segments before first; replay reads the
	// rest.
	first := s.loadSnapshot(ids)
	var last *segment
	s.log.nextID = max(s.log.nextID, first)
	if len(ids) > 0 {
		s.log.nextID = max(s.log.nextID, ids[len(ids)-1]+1)
	}
	for len(ids) > 0 && ids[0] < first {
		ids = ids[1:]
	}
	// Only the tail of the log may be torn: the last segment that holds
	// more than its header (a crash while rotating leaves a new, empty
	// segment after a torn one).
	tail := len(ids) - 1
	for tail > 0 {
		has, err := hasFrames(filepath.Join(s.log.dir, segmentName(ids[tail])))
		if err != nil {
			return err
		}
		if has {
			break
		}
		tail--
	}
	for i, id := range ids {
		seg, err := s.replay(id, i >= tail)
		if err != nil {
			return err
		}
		if seg == nil {
			continue // a segment cut before its header was written: removed
		}
		s.log.addSeg(seg)
		last = seg
	}
	s.settle()
	if last == nil || last.size >= s.log.maxSegment {
		last = s.log.newSegment() // its file comes with its first write
	}
	s.log.active = last
	if n := s.count(); n > 0 {
		s.logger.Info("file: recovered the log", "records", n, "segments", len(ids))
	}
	return nil
}

// settle ends a replay: the entries of released keys leave the index,
// and every other entry counts its frame's bytes in its segment and gets
// its expiry item.
func (s *Store) settle() {
	live := map[uint32]int64{}
	for i := range s.stripes {
		st := &s.stripes[i]
		items := map[int64][]uint32{}
		var seg *segment // the last entry's, as a rule the next one's too
		for slot := range st.slots {
			e := st.at(slot)
			if e.state == stateFree {
				continue
			}
			if seg == nil || uint32(seg.id) != e.seg {
				seg = s.log.segment(e.seg)
			}
			if e.state == stateDeleted || seg == nil {
				st.remove(slot)
				continue
			}
			live[e.seg] += int64(e.size)
			sec := expSec(e.exp)
			items[sec] = append(items[sec], ref(i, slot))
		}
		s.exp.addMany(items)
		st.seqs = nil
	}
	for id, n := range live {
		s.log.segment(id).live.Add(n)
	}
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

// apply makes m, the frame at off in seg, its key's entry if no frame of
// the key with a higher seq was replayed. A delete leaves a deleted entry
// until settle, so that an older put replayed after it (in an older
// segment's copy) does not bring the key back.
func (s *Store) apply(m *meta, seg uint32, off, size int) {
	st := &s.stripes[stripeOf(m.id)]
	e := entry{tag: tagOf(&m.id), state: m.state, exp: m.exp, lease: m.lease,
		seg: seg, off: uint32(off), size: uint32(size)}
	if m.kind == kindDel {
		e.state = stateDeleted
	} else if m.state == 1 {
		// The holder died with the process that wrote it.
		if bound := nanos(s.opened.Add(max(m.dur, 0))); e.lease > bound {
			e.lease = bound
		}
	}
	slot, ok := st.find(e.tag)
	if !ok {
		slot = st.insert(e)
		for int(slot) >= len(st.seqs) {
			st.seqs = append(st.seqs, 0)
		}
		st.seqs[slot] = m.seq
		return
	}
	if int(slot) >= len(st.seqs) || m.seq > st.seqs[slot] {
		// A slot past seqs was loaded from the snapshot: every frame
		// replayed is newer.
		for int(slot) >= len(st.seqs) {
			st.seqs = append(st.seqs, 0)
		}
		*st.at(slot) = e
		st.seqs[slot] = m.seq
	}
}

// replay reads segment id into the index. The last segment is the only one
// whose tail may be torn.
func (s *Store) replay(id uint64, last bool) (*segment, error) {
	path := filepath.Join(s.log.dir, segmentName(id))
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	seg := &segment{id: id, path: path, f: f, named: true}
	torn := func(off int, why string) (*segment, error) {
		if !last {
			f.Close()
			return nil, fmt.Errorf("%w: segment %s at byte %d: %s", ErrCorrupt, segmentName(id), off, why)
		}
		s.logger.Info("file: dropping the unacknowledged tail of the log", "segment", segmentName(id), "at", off, "why", why)
		if off < len(segmentMagic) {
			// Cut while being created: it holds nothing. Removed rather
			// than written again, which could need room the disk lacks.
			f.Close()
			if err := os.Remove(path); err != nil {
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
		seg.size, seg.synced, seg.written = int64(off), int64(off), int64(off)
		seg.ready.Store(int64(off))
		return seg, nil
	}
	if len(data) < len(segmentMagic) {
		return torn(0, "short header")
	}
	if allZero(data[:len(segmentMagic)]) {
		// Allocated, then cut before its header was written.
		return torn(0, "no header")
	}
	if !bytes.Equal(data[:len(segmentMagic)], segmentMagic) {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not an idem log segment", ErrCorrupt, segmentName(id))
	}
	off := len(segmentMagic)
	for off < len(data) {
		if allZero(data[off:min(off+frameHeader, len(data))]) {
			// Allocated space never written: the segment ends here, if
			// nothing follows.
			if allZero(data[off:]) {
				break
			}
			return torn(off, "frames after a gap")
		}
		if len(data)-off < frameHeader {
			return torn(off, "short frame header")
		}
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n > maxBody || len(data)-off-frameHeader < n {
			return torn(off, "short frame")
		}
		body := data[off+frameHeader : off+frameHeader+n]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[off+4:]) {
			return torn(off, "checksum mismatch")
		}
		m, err := decodeMeta(body)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("segment %s at byte %d: %w", segmentName(id), off, err)
		}
		if m.seq > s.seq.Load() {
			s.seq.Store(m.seq)
		}
		if m.kind == kindDel && m.id == (keyID{}) {
			// Store.Writable's no-op frame.
		} else {
			s.apply(&m, uint32(id), off, frameHeader+n)
		}
		off += frameHeader + n
	}
	// The zeros after off may be fallocated space, not written zeros: the
	// next fill writes them again.
	seg.size, seg.synced, seg.written = int64(off), int64(off), int64(off)
	seg.ready.Store(int64(off))
	return seg, nil
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
