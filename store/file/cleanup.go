package file

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"

	"time"
)

// Cleanup implements store.Store. It walks the expiry index from its start
// up to now, so it visits only records that are due, never a live one.
// Expired records need no delete entry: replayed after a crash they are
// still expired. Then it reclaims disk: the oldest segment is dropped once
// no record lives in it, and compacted (its live records copied to the
// head of the log) when it is mostly dead or the log has grown past twice
// its live data, segment after segment until the log is back within
// that. While the log cannot write (a full disk), it drops the
// segments no record lives in, which frees room, and compacts none.
// Once the log written since the last index snapshot is as large
// as a snapshot, it writes one (its cost grows with the live records, and
// it comes once per that much log). The log's rotation to a new segment
// does all of this as well, in the background (see rotated), but for
// the compaction of a segment that is merely mostly dead: Cleanup's
// interval bounds neither the disk nor the log a restart replays.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("file: cleanup: %w", err)
	}
	defer s.closeMu.RUnlock()
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	n, err := s.sweep(ctx, s.clock.Now(), limit)
	if err != nil {
		return n, fmt.Errorf("file: cleanup: %w", err)
	}
	if err := s.reclaim(ctx, true); err != nil {
		return n, fmt.Errorf("file: cleanup: %w", err)
	}
	if s.snapshotDue() {
		if err := s.snapshot(); err != nil {
			s.logger.Warn("file: index snapshot failed; the last one stands", "err", err)
		}
	}
	return n, nil
}

// snapshotDue reports whether the log written since the last snapshot
// began is worth a new one: at least two segments, and the bytes the
// snapshot would take, so that a restart after a kill replays at most
// about one snapshot's worth of log, and snapshots add at most as many
// bytes as the log's own writes. A log that cannot write takes none.
func (s *Store) snapshotDue() bool {
	if s.log.unwritable.Load() != nil || s.log.broken.Load() != nil {
		return false
	}
	first := s.snapFirst.Load()
	s.log.mu.Lock()
	var tail int64
	for id, sg := range s.log.segs {
		if id >= first {
			tail += sg.size
		}
	}
	s.log.mu.Unlock()
	return tail >= 2*s.log.maxSegment && tail >= int64(s.count())*snapEntry
}

// sweep removes the records expired at now, at most limit of them (all
// when limit <= 0), visiting the expiry items of the seconds up to now's.
// cleanMu is held.
func (s *Store) sweep(ctx context.Context, now time.Time, limit int) (int, error) {
	nowNs, nowSec := nanos(now), expSec(nanos(now))
	n := 0
	for limit <= 0 || n < limit {
		want := 256
		if limit > 0 {
			want = min(want, limit-n)
		}
		items, sec, ok := s.exp.take(nowSec, want)
		if !ok {
			return n, nil
		}
		var keep []uint32
		for i, r := range items {
			if err := ctx.Err(); err != nil {
				s.exp.putBack(sec, items[i:])
				return n, err
			}
			s.scanned++
			i, slot := unref(r)
			st := &s.stripes[i]
			st.mu.Lock()
			if slot < st.slots {
				e := st.at(slot)
				switch {
				case e.state == stateFree || expSec(e.exp) != sec:
					// An item of an earlier write, or of a slot freed
					// since: the record's own item is elsewhere.
				case e.expired(nowNs):
					s.index(st, int(slot), nil)
					n++
				default:
					keep = append(keep, r) // due later in this second
				}
			}
			st.mu.Unlock()
		}
		s.exp.putBack(sec, keep)
		if len(keep) > 0 {
			// Now's own second, whose other items are not due yet: the
			// next Cleanup visits them again.
			return n, nil
		}
	}
	return n, nil
}

// reclaim drops and compacts the oldest segments; cleanMu is held. Only
// the oldest segment is ever removed: a delete entry then never outlives
// an older put of its key, so nothing released comes back on replay. It
// goes on, a segment at a time, while the log holds more than 1.6 times
// its live data (every segment counted, the one being written too), so
// that one call restores the bound however far the writes ran ahead; with
// sparse it also compacts a segment mostly dead. The bound the store
// keeps is twice; reclaiming to 1.6 times leaves room for what comes
// before the next reclaim, a rotation later: the new frames, up to an
// eighth of the live data (see rollSize; a quarter while segments are
// at their least, 1 MiB, and 4 MiB live), while as much may expire.
// Lower would cost copies: a key's reservation frame is dead once its
// outcome is written, so a log of small responses holds up to about
// twice its live data with no expired record at all. It takes only
// segments sealed before it began: the copies it makes are not taken
// again, and a log whose live data is less than the segment being
// written, which no compaction can shrink, costs one pass, not a loop.
func (s *Store) reclaim(ctx context.Context, sparse bool) error {
	end := s.log.activeID()
	for ctx.Err() == nil {
		old, f, size := s.log.oldest()
		if old == nil || old.id >= end {
			return nil
		}
		if old.live.Load() > 0 {
			total, live, sealedDead := s.log.usage()
			mostlyDead := sparse && old.live.Load()*2 < size
			// Compaction takes back only the dead bytes of sealed
			// segments: with few, it would copy live frames for nothing
			// (and on a full disk, take the room they need).
			bloated := 5*total > 8*live && sealedDead > live/8
			if !mostlyDead && !bloated || s.log.unwritable.Load() != nil {
				return nil
			}
			if err := s.compact(old, f, size); err != nil {
				return err
			}
			if old.live.Load() > 0 {
				return nil // its last frames are still being written; next time
			}
		}
		if !s.deadForGood(old) {
			return nil
		}
		if err := s.log.drop(old); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// deadForGood reports whether old, which no index entry points to, stays
// so: a write that replaced its last live frame may still wait for its
// sync (a reservation that returned before it, or a writer holding its
// stripe), and if that sync fails the undo points the key back at its
// frame in old, the key's durable state. It waits for the syncs of the
// frames appended so far to end, and for the writes among them that
// failed to be undone.
func (s *Store) deadForGood(old *segment) bool {
	if b := s.log.lastBatch(); b != nil {
		s.log.wait(b) // a failure is the writers' to undo
	}
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock() // a writer that waited for its sync holds it until it undid
		s.prune(st)
		st.mu.Unlock()
	}
	return old.live.Load() == 0
}

// compactBatch is how many frames compact copies per sync.
const compactBatch = 256

// compact copies the frames of old (whose file is f, its frames size
// bytes long) that the index still points to to the head of the log,
// keeping their seq, and points the index at the copies. Each key's
// stripe is held until its copy is durable, as in every write; copies
// that could not be made durable leave the index pointing at old.
func (s *Store) compact(old *segment, f *os.File, size int64) error {
	// Up to the segment's last frame: the file's allocated tail is zeros.
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return err
	}
	c := &compaction{s: s, old: old}
	defer c.unlock()
	for off := len(segmentMagic); off+frameHeader <= len(data); {
		n := int(binary.BigEndian.Uint32(data[off:]))
		if off+frameHeader+n > len(data) {
			break
		}
		c.copyFrame(data[off:off+frameHeader+n], off)
		off += frameHeader + n
		if len(c.moves) >= compactBatch {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return c.flush()
}

// A compaction is what compact holds between syncs: the stripes it has
// locked, the copies made since the last sync and the batches that carry
// them.
type compaction struct {
	s       *Store
	old     *segment
	held    [stripes]bool
	moves   []compactMove
	batches []*batch
}

// A compactMove is a copy of a key's frame: the entries before and after.
type compactMove struct {
	stripe   int
	slot     int
	from, to entry
}

// copyFrame appends a copy of frame, found at off in old, to the log and
// points the index at it if the index points at the frame, locking the
// key's stripe until the next flush.
func (c *compaction) copyFrame(frame []byte, off int) {
	s := c.s
	var id keyID
	copy(id[:], frame[frameHeader+9:frameHeader+41])
	i := stripeOf(id)
	if !c.held[i] {
		s.stripes[i].mu.Lock()
		c.held[i] = true
		// A frame moved must be one that stands.
		s.settleWritten(&s.stripes[i])
	}
	st := &s.stripes[i]
	if slot, e := lookup(st, &id); slot >= 0 && e.seg == uint32(c.old.id) && e.off == uint32(off) {
		seg, at, b := s.log.append(frame)
		moved := e
		moved.seg, moved.off = uint32(seg.id), uint32(at)
		s.index(st, slot, &moved)
		c.moves = append(c.moves, compactMove{i, slot, e, moved})
		if len(c.batches) == 0 || c.batches[len(c.batches)-1] != b {
			c.batches = append(c.batches, b)
		}
	}
}

// flush waits for the copies' batches to be durable, then unlocks the
// stripes held; if one is not, the index points at the originals again.
func (c *compaction) flush() error {
	var err error
	for _, b := range c.batches {
		if werr := c.s.log.wait(b); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		// Some copy is not durable (a failed sync drops every frame
		// appended after it, so it may not be the last): keep the
		// originals, which are. A copy that did reach the disk holds
		// the original's seq and content: replay keeps either.
		for _, m := range c.moves {
			c.s.index(&c.s.stripes[m.stripe], m.slot, &m.from)
		}
	}
	c.unlock()
	c.moves, c.batches = c.moves[:0], c.batches[:0]
	return err
}

// unlock unlocks the stripes held.
func (c *compaction) unlock() {
	for i, h := range c.held {
		if h {
			c.s.stripes[i].mu.Unlock()
			c.held[i] = false
		}
	}
}

// CountExpired counts the records that have expired from the expiry index,
// so it costs what a Cleanup would (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("file: count expired: %w", err)
	}
	defer s.closeMu.RUnlock()
	now := nanos(s.clock.Now())
	n := 0
	for sec, items := range s.exp.due(expSec(now)) {
		seen := map[uint32]bool{}
		for _, r := range items {
			i, slot := unref(r)
			st := &s.stripes[i]
			st.mu.Lock()
			if !seen[r] && slot < st.slots {
				if e := st.at(slot); e.state != stateFree && expSec(e.exp) == sec && e.expired(now) {
					n++
				}
			}
			seen[r] = true
			st.mu.Unlock()
		}
	}
	return n, nil
}
