package file

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/dirlock"
	"github.com/idem-dev/idem/store/internal/hold"
	"github.com/idem-dev/idem/store/internal/monoclock"
)

// ErrLocked is returned by Open when another process, or another Store in
// this one, has the directory open. The embedded stores share it.
var ErrLocked = dirlock.ErrLocked

// maxSegmentBytes bounds Options.SegmentBytes, so that a segment's frames,
// with the writes of one sync past it, stay within the index's 32-bit
// offsets.
const maxSegmentBytes = 1 << 30

// lockFile is the file, inside the directory, that Open locks.
const lockFile = "idem.lock"

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Logger receives recovery and compaction messages. Nil means
	// slog.Default().
	Logger *slog.Logger
	// SegmentBytes is the size past which the log starts a new segment
	// file. Zero means 64 MiB; at most 1 GiB. Smaller segments are dropped and compacted
	// sooner; larger ones mean fewer files.
	SegmentBytes int64
	// MinSegmentBytes is the smallest a segment is made while little is
	// live: the log starts a new segment past an eighth of its live data,
	// at least MinSegmentBytes and at most SegmentBytes, so that the
	// segment being written and the oldest, partly expired, which no
	// reclaim can shrink, weigh at most a quarter of the live data in the
	// log's bound of twice the live data (docs/stores/FILE.md). Zero means 1 MiB; more than
	// SegmentBytes means SegmentBytes (segments of one size).
	MinSegmentBytes int64
	// WallClock is read once, when Open starts, to set the store's clock,
	// which then advances on the monotonic clock only (see "One clock" in
	// the package doc). Nil means time.Now.
	WallClock func() time.Time
	// Headroom is the room a new reservation needs free on the store's
	// filesystem: about the largest outcome it may have to record (the
	// gateway sets it from max_response_bytes). Below it new
	// reservations are refused with an error matching store.ErrNoSpace,
	// so that no work starts whose outcome the store has no room for;
	// replays, and outcomes of work under way, are served and written.
	// Zero means 1 MiB.
	Headroom int64
	// OneSync lets a first call sync once: a reservation that may be
	// taken over once stale (ReserveRequest.TakeOverStale: the engine's
	// on_stale: retry) returns without waiting for the disk. Of a key
	// the index does not hold, it writes no frame: the holder's next
	// write (Complete, as a rule) carries the whole record, so a first
	// call appends one frame; another caller that reads the key, or
	// Close, has the reservation written and synced first. A taken-over
	// key's reservation is appended, and durable once any later write's
	// sync returns. A crash before either loses the reservation, as it
	// loses its holder, and the key is free again (as on_stale: retry
	// would make it after a lease). A reservation that may not be taken
	// over (on_stale: conflict) waits for its sync as before. The
	// gateway sets it.
	OneSync bool
	// HoldFor bounds how long OneSync keeps a reservation's frame
	// unwritten: one held longer is appended and written, without its
	// holder waiting, by a goroutine that looks every half HoldFor (see
	// sweepHeld), so that a process killed during a slow call leaves the
	// key in progress, outcome unknown, rather than no trace of it. A
	// call that completes within the bound still appends one frame. Zero
	// means 50 ms (hold.Default); negative means every reservation's
	// frame is appended at once, to be synced by the next write's sync.
	HoldFor time.Duration

	// now, in tests, replaces the store's clock: every instant is read
	// from it, jumps included.
	now func() time.Time
	// cleanupOnly, in tests of Cleanup, leaves expired records and the
	// log's segments to Cleanup alone (see rotated).
	cleanupOnly bool
}

// Store is the embedded store. It is safe for concurrent use; Open it once
// per directory and share it.
type Store struct {
	log     *log
	lock    io.Closer // the directory's flock
	logger  *slog.Logger
	seq     atomic.Uint64 // the last entry's seq
	stripes [stripes]stripe
	exp     *expiryIndex
	clock   *monoclock.Clock
	// opened is the store's clock when Open began: recovery holds a
	// record left in progress to at most its lease from then.
	opened time.Time

	cleanupOnly bool          // Options.cleanupOnly
	oneSync     bool          // Options.OneSync
	swept       atomic.Int64  // records the sweeps on rotation removed, for tests
	kept        atomic.Uint32 // numbers the reservations kept in memory (reserveAsync)
	// nkept counts the pending reservations kept in memory (b nil), so
	// that a sweep skips the stripes while there are none; holdFor is
	// Options.HoldFor's bound, and sweeper writes those held longer.
	nkept   atomic.Int64
	holdFor time.Duration
	sweeper *hold.Sweeper

	// snapMu serializes index snapshots (snapshot.go); snapFirst is the
	// first segment the last one written or read needs replayed.
	snapMu       sync.Mutex
	snapFirst    atomic.Uint64
	snapRunning  atomic.Bool // the work of a rotation runs (rotated)
	rotatedAgain atomic.Bool // a rotation's work is to do (rotated)

	// cleanMu serializes Cleanup, the only caller that holds several
	// stripes at once, so that two of them cannot deadlock.
	cleanMu sync.Mutex
	scanned int // expiry items Cleanup has visited, for tests; guarded by cleanMu
	// closeMu is read-held by every method for its whole duration and
	// write-held by Close, which so waits for them before closing files.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu

	// hub wakes the waiters of the engines sharing this store (notify.go).
	hub wakeup.Hub
}

var _ store.Store = (*Store)(nil)

// Open opens the store in dir, creating dir and an empty store if needed,
// and recovers every record from its log. It fails with an error matching
// ErrLocked while another process has the same directory open.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 20
	}
	if opts.MinSegmentBytes <= 0 {
		opts.MinSegmentBytes = 1 << 20
	}
	opts.MinSegmentBytes = min(opts.MinSegmentBytes, opts.SegmentBytes)
	if opts.SegmentBytes > maxSegmentBytes {
		// The index addresses a frame in its segment with 32 bits.
		return nil, fmt.Errorf("file: open %s: Options.SegmentBytes %d is more than the largest segment, %d bytes (1 GiB): set it lower, or leave it zero for 64 MiB", dir, opts.SegmentBytes, int64(maxSegmentBytes))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	lock, err := dirlock.Lock(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	clock := monoclock.New(opts.WallClock)
	if opts.now != nil {
		clock = monoclock.Stepped(opts.now)
	}
	s := &Store{
		log:    newLog(dir, opts.MinSegmentBytes, opts.SegmentBytes, opts.Headroom),
		lock:   lock,
		logger: opts.Logger,
		exp:    newExpiryIndex(),
		clock:  clock,
		opened: clock.Now(),

		cleanupOnly: opts.cleanupOnly,
		oneSync:     opts.OneSync,
		holdFor:     hold.Bound(opts.HoldFor),
	}
	for i := range s.stripes {
		s.stripes[i].n = uint8(i)
	}
	if err := s.recover(); err != nil {
		s.log.close()
		lock.Close()
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	s.log.onRotate = s.rotated
	if s.oneSync && !hold.AtOnce(s.holdFor) {
		s.sweeper = hold.Start(s.holdFor, s.sweepHeld)
	}
	return s, nil
}

// begin starts a method: it checks ctx and Close. On success the caller
// must call s.closeMu.RUnlock. A log that cannot write does not stop
// reads: they are served from the index and the segments' pages.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return store.ErrClosed
	}
	return nil
}

// withKey runs fn holding keyHash's stripe, once ctx and Close allow,
// and once a reservation of the key that returned before its sync has
// ended one way or the other (settle).
func (s *Store) withKey(ctx context.Context, op, keyHash string, fn func(st *stripe, id keyID) error) error {
	return s.withKeyAs(ctx, op, keyHash, false, fn)
}

// withKeyAs is withKey for the holder of the key's reservation when
// holder is set: it does not wait for that reservation's sync (see held).
func (s *Store) withKeyAs(ctx context.Context, op, keyHash string, holder bool, fn func(st *stripe, id keyID) error) error {
	id, err := parseKeyHash(keyHash)
	if err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	defer s.closeMu.RUnlock()
	st := &s.stripes[stripeOf(id)]
	st.mu.Lock()
	defer st.mu.Unlock()
	// The wait for the stripe may have outlasted ctx: do nothing then.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	if !holder {
		if err := s.settlePending(st, &id); err != nil {
			return fmt.Errorf("file: %s: %w", op, err)
		}
	}
	if err := fn(st, id); err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	return nil
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// put appends r as id's latest frame, points the index at it, and returns
// once the frame is durable; if the frame could not be made durable, it
// puts the index back as it was and returns the error. slot is id's slot
// in st, or -1 for a key the index does not hold; lease is the lease
// r.LeaseUntil was set from. The stripe is held.
func (s *Store) put(st *stripe, id keyID, slot int, r *store.Record, lease time.Duration) error {
	p, err := s.putAsync(st, id, slot, r, lease)
	if err != nil {
		return err
	}
	if err := s.log.wait(p.b); err != nil {
		s.undo(st, &p)
		return err
	}
	return nil
}

// pending is a reservation that returned before its sync (Options.OneSync):
// a write whose frame is appended and indexed and whose sync may not have
// ended, what undoes it if the sync fails; or, with b nil, one whose
// frame is not written at all (see inMemory), kept here until its
// holder's next write, which carries the whole record, or a reader that
// needs it on disk (settlePending) writes it.
type pending struct {
	id     keyID
	b      *batch        // nil: the frame is not written (the entry's seg is inMemory)
	e      entry         // the entry the write made
	before entry         // the key's entry before it (stateFree: none)
	rec    store.Record  // the record written (for a reservation: no value)
	lease  time.Duration // the lease rec.LeaseUntil was set from
	tick   uint32        // the sweep count when a reservation was kept in memory (hold.Due)
	// kept: the frame was written by a sweep (sweepHeld) for a
	// reservation kept in memory, whose entry is before; should its sync
	// fail, it is kept in memory again (see unwrite).
	kept bool
}

// inMemory is the segment of an index entry whose frame is not written:
// a reservation of a key the index did not hold, under OneSync. No
// segment has id 0. Such an entry counts no live bytes, and nothing reads
// its frame: its holder takes the record from its pending, anyone else
// has it written first (settlePending), and index snapshots leave it out.
const inMemory uint32 = 0

// undo puts the index back as it was before p, if the key's entry is
// still p's (a later write of the key replaced it otherwise). The stripe
// is held.
func (s *Store) undo(st *stripe, p *pending) {
	slot, cur := lookup(st, &p.id)
	if slot < 0 || cur.seg != p.e.seg || cur.off != p.e.off {
		return
	}
	if p.before.state == stateFree {
		s.index(st, slot, nil)
	} else {
		s.index(st, slot, &p.before)
	}
}

// settlePending waits for the reservations of st that returned before their
// sync (Options.OneSync), of key id only when id is not nil, writing
// first the frames of those kept in memory, and undoes those whose sync
// failed: their frames never reached the disk, and nothing may read them
// or keep an entry that points to them. Reserve and Get settle a key
// before they read it, so that every other caller sees a reservation that
// stands, or its undoing; Close settles every stripe. A reservation kept
// in memory whose frame cannot be made durable (a full disk) stays in
// memory, its holder's, and its error is returned: the caller must not
// read the key. The stripe is held.
func (s *Store) settlePending(st *stripe, id *keyID) error { return s.settleSome(st, id, true) }

// settleWritten is settlePending for every key of st whose frame is
// written, leaving those kept in memory as they are: the index snapshot
// leaves them out, and the compaction moves no frame of theirs, nor one
// that their undoing would point back to (they replaced no entry). The
// stripe is held.
func (s *Store) settleWritten(st *stripe) { s.settleSome(st, nil, false) }

// settleSome is settlePending, and settleWritten unless write is set.
func (s *Store) settleSome(st *stripe, id *keyID, write bool) error {
	if len(st.pend) == 0 {
		return nil
	}
	var failed error
	var kept int64 // the change in reservations kept in memory
	keep := st.pend[:0]
	for i := range st.pend {
		p := st.pend[i]
		switch {
		case id != nil && p.id != *id || p.b == nil && !write:
			keep = append(keep, p)
		case p.b == nil:
			if err := s.writeKept(st, &p); err != nil {
				keep = append(keep, p)
				failed = err
			} else {
				kept--
			}
		default:
			if err := s.log.wait(p.b); err == nil {
				break
			}
			if r, ok := s.unwrite(st, &p); ok {
				if !write {
					keep, kept = append(keep, r), kept+1
				} else if err := s.writeKept(st, &r); err != nil {
					keep, kept = append(keep, r), kept+1
					failed = err
				}
			}
		}
	}
	clear(st.pend[len(keep):])
	st.pend = keep
	if kept != 0 {
		s.nkept.Add(kept)
	}
	return failed
}

// writeKept writes the frame of p, a reservation kept in memory, points
// the index at it and waits for its sync; nothing is left to settle then,
// nor when the key's entry is no longer p's (it expired and was swept). A
// frame too large for the log undoes the reservation, as Reserve would
// have refused it. If the sync fails, the index points at the entry kept
// in memory again, and writeKept returns the error: p stays pending. The
// stripe is held.
func (s *Store) writeKept(st *stripe, p *pending) error {
	slot := keptSlot(st, &p.id, p.e.off)
	if slot < 0 {
		return nil
	}
	w, err := s.putAsync(st, p.id, slot, &p.rec, p.lease)
	if err != nil {
		s.undo(st, p)
		return nil
	}
	if err := s.log.wait(w.b); err != nil {
		s.undo(st, &w) // back to the entry kept in memory
		return err
	}
	return nil
}

// keptSlot returns the index slot of id's entry while it is still the
// reservation kept in memory numbered off (neither swept nor replaced
// since), or -1. The stripe is held.
func keptSlot(st *stripe, id *keyID, off uint32) int {
	slot, cur := lookup(st, id)
	if slot < 0 || cur.seg != inMemory || cur.off != off {
		return -1
	}
	return slot
}

// prune drops the pending reservations of st whose syncs have ended,
// undoing those that failed, and those kept in memory whose entry is gone
// (swept), without waiting for the others. The stripe is held.
func (s *Store) prune(st *stripe) {
	var kept int64 // the change in reservations kept in memory
	keep := st.pend[:0]
	for i := range st.pend {
		p := st.pend[i]
		if p.b == nil {
			if keptSlot(st, &p.id, p.e.off) >= 0 {
				keep = append(keep, p) // its holder's next write ends it
			} else {
				kept--
			}
			continue
		}
		select {
		case <-p.b.done:
			if p.b.err == nil {
				break
			}
			if r, ok := s.unwrite(st, &p); ok {
				keep, kept = append(keep, r), kept+1
			}
		default:
			keep = append(keep, p)
		}
	}
	clear(st.pend[len(keep):])
	st.pend = keep
	if kept != 0 {
		s.nkept.Add(kept)
	}
}

// pendingOf returns the index in st.pend of id's pending reservation, or
// -1. The stripe is held.
func pendingOf(st *stripe, id *keyID) int {
	for i := range st.pend {
		if st.pend[i].id == *id {
			return i
		}
	}
	return -1
}

// forget drops id's pending reservation from st, if any. The stripe is
// held.
func (s *Store) forget(st *stripe, id *keyID) {
	if i := pendingOf(st, id); i >= 0 {
		if st.pend[i].b == nil {
			s.nkept.Add(-1)
		}
		n := len(st.pend) - 1
		copy(st.pend[i:], st.pend[i+1:])
		st.pend[n] = pending{} // keeps no record alive
		st.pend = st.pend[:n]
	}
}

// putAsync appends r as id's latest frame and points the index at it,
// without waiting for its sync: the caller waits for p.b, and undoes p
// if that fails. The stripe is held.
func (s *Store) putAsync(st *stripe, id keyID, slot int, r *store.Record, lease time.Duration) (pending, error) {
	if uint64(len(r.Value)) > maxBody {
		// Refused before copying it into a frame; recovery would read a
		// longer frame as damage.
		return pending{}, fmt.Errorf("%w: a value of %d bytes", ErrTooLarge, len(r.Value))
	}
	bp := framePool.Get().(*[]byte)
	seq := s.seq.Add(1)
	b, _ := appendFrame((*bp)[:0], kindPut, seq, id, r, lease)
	if len(b)-frameHeader > maxBody {
		return pending{}, fmt.Errorf("%w: a record of %d bytes", ErrTooLarge, len(b))
	}
	seg, off, batch := s.log.append(b)
	e := entry{tag: tagOf(&id), state: stateOf(r.State), exp: nanos(r.ExpiresAt), lease: nanos(r.LeaseUntil),
		seg: uint32(seg.id), off: uint32(off), size: uint32(len(b))}
	if cap(b) <= 64<<10 { // a 4 MiB response's buffer is not kept
		*bp = b
		framePool.Put(bp)
	}
	p := pending{id: id, b: batch, e: e}
	if slot >= 0 {
		p.before = *st.at(uint32(slot))
	}
	s.index(st, slot, &e)
	return p, nil
}

// ErrTooLarge is returned for a record whose frame would pass 64 MiB.
var ErrTooLarge = errors.New("file: record too large")

// index points slot at e (nil: frees the slot; slot -1: e goes in a new
// slot), keeping the segments' live bytes and the expiry index in step,
// and returns the slot. The stripe is held.
func (s *Store) index(st *stripe, slot int, e *entry) int {
	var cur *entry
	if slot >= 0 {
		cur = st.at(uint32(slot))
		if cur.seg != inMemory {
			s.log.segment(cur.seg).live.Add(-int64(cur.size))
		}
	}
	if e == nil {
		st.remove(uint32(slot)) // its expiry item stays until Cleanup visits it
		return -1
	}
	if e.seg != inMemory {
		s.log.segment(e.seg).live.Add(int64(e.size))
	}
	moved := cur == nil || expSec(cur.exp) != expSec(e.exp)
	if cur == nil {
		slot = int(st.insert(*e))
	} else {
		*cur = *e
	}
	if moved {
		s.exp.add(expSec(e.exp), ref(int(st.n), uint32(slot)))
	}
	return slot
}

// lookup returns id's slot in st and a copy of its entry, or -1.
func lookup(st *stripe, id *keyID) (int, entry) {
	slot, ok := st.find(tagOf(id))
	if !ok {
		return -1, entry{}
	}
	return int(slot), *st.at(slot)
}

// read reads e's frame back from its segment: the record as written, its
// value included. It checks that the frame is id's whole key hash.
func (s *Store) read(id *keyID, e *entry) (store.Record, error) {
	seg := s.log.segment(e.seg)
	if seg == nil || seg.f == nil {
		return store.Record{}, fmt.Errorf("%w: the index points to segment %d, which is gone", ErrCorrupt, e.seg)
	}
	buf := make([]byte, e.size)
	if _, err := seg.f.ReadAt(buf, int64(e.off)); err != nil {
		return store.Record{}, fmt.Errorf("read %s at %d: %w", segmentName(seg.id), e.off, err)
	}
	// The frame's checksum is checked again: a snapshot spares Open the
	// read of sealed segments, so damage there is found here, and fails
	// the call rather than answer with it.
	if crc32.Checksum(buf[frameHeader:], castagnoli) != binary.BigEndian.Uint32(buf[4:]) {
		return store.Record{}, fmt.Errorf("%w: %s at %d: checksum mismatch", ErrCorrupt, segmentName(seg.id), e.off)
	}
	fr, err := decodeBody(buf[frameHeader:])
	if err != nil {
		return store.Record{}, fmt.Errorf("%s at %d: %w", segmentName(seg.id), e.off, err)
	}
	if fr.id != *id || fr.kind != kindPut {
		return store.Record{}, fmt.Errorf("%w: %s at %d holds another key's frame than the index says", ErrCorrupt, segmentName(seg.id), e.off)
	}
	r := fr.rec
	if fr.valLen > 0 {
		r.Value = buf[fr.valAt : fr.valAt+fr.valLen : fr.valAt+fr.valLen]
	}
	// Recovery may have held the lease shorter than the frame says.
	r.LeaseUntil = fromNanos(e.lease)
	return r, nil
}

// record returns e's record as read at now.
func (s *Store) record(id *keyID, e *entry, now time.Time) (store.Record, error) {
	r, err := s.read(id, e)
	if err != nil {
		return r, err
	}
	r.SetReadAt(now)
	return r, nil
}

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	var res store.Reservation
	err := s.withKey(ctx, "reserve", req.Record.KeyHash, func(st *stripe, id keyID) error {
		now := s.clock.Now()
		slot, cur := lookup(st, &id)
		if slot >= 0 && !cur.expired(nanos(now)) {
			rec, err := s.read(&id, &cur)
			if err != nil {
				return err
			}
			if !(req.TakeOverStale && cur.stale(nanos(now)) &&
				rec.Fingerprint == req.Record.Fingerprint && rec.Binding == req.Record.Binding) {
				rec.SetReadAt(now)
				res.Existing = rec
				return nil
			}
			res.TookOver = true
		}
		// A log that cannot write refuses a new reservation at once,
		// rather than have work start whose outcome it cannot keep.
		if err := s.log.admit(); err != nil {
			return err
		}
		r := req.Record
		r.State, r.Value = store.InProgress, nil
		r.CreatedAt, r.UpdatedAt = now, now
		r.ExpiresAt, r.LeaseUntil = now.Add(req.TTL), now.Add(req.Lease)
		if s.oneSync && req.TakeOverStale {
			// Excluding every other caller from now on takes the index
			// entry alone; the frame's sync is left to the next write's
			// (see Options.OneSync and settlePending).
			s.prune(st)
			if err := s.reserveAsync(st, id, slot, &r, req.Lease); err != nil {
				return err
			}
			res.Acquired = true
			return nil
		}
		if err := s.put(st, id, slot, &r, req.Lease); err != nil {
			return err
		}
		res.Acquired = true
		return nil
	})
	if err != nil {
		return store.Reservation{}, err
	}
	return res, nil
}

// reserveAsync indexes r, a reservation that may be taken over once
// stale, without waiting for its sync, and keeps it in st.pend. A key
// the index does not hold has no frame written at all (inMemory): its
// holder's next write, Complete as a rule, carries the whole record and
// stands for it, so that a first call appends one frame and leaves no
// dead one for reclaim to copy past. A crash before loses it, as it
// would lose a frame not yet synced. A key the index holds (a stale
// reservation taken over, an expired record) has its frame appended:
// should its sync fail, the undoing points the key back at a frame on
// disk. The stripe is held.
func (s *Store) reserveAsync(st *stripe, id keyID, slot int, r *store.Record, lease time.Duration) error {
	if slot >= 0 || hold.AtOnce(s.holdFor) {
		p, err := s.putAsync(st, id, slot, r, lease)
		if err != nil {
			return err
		}
		p.rec, p.lease = *r, lease
		st.pend = append(st.pend, p)
		return nil
	}
	// off tells this entry from any other kept in memory.
	e := entry{tag: tagOf(&id), state: stateOf(r.State), exp: nanos(r.ExpiresAt), lease: nanos(r.LeaseUntil),
		seg: inMemory, off: uint32(s.kept.Add(1))}
	s.index(st, -1, &e)
	st.pend = append(st.pend, pending{id: id, e: e, rec: *r, lease: lease, tick: s.sweeper.Now()})
	s.nkept.Add(1)
	return nil
}

// Get implements store.Store. It reads the index and the record's frame
// only, so it works while the disk is full.
func (s *Store) Get(ctx context.Context, _, keyHash string) (store.Record, error) {
	var r store.Record
	err := s.withKey(ctx, "get", keyHash, func(st *stripe, id keyID) error {
		now := s.clock.Now()
		slot, e := lookup(st, &id)
		if slot < 0 || e.expired(nanos(now)) {
			return store.ErrNotFound
		}
		var err error
		r, err = s.record(&id, &e, now)
		return err
	})
	if err != nil {
		return store.Record{}, err
	}
	return r, nil
}

// held runs fn on the in_progress record that f's token holds, under its
// stripe, or returns ErrLeaseLost. The token is in the frame: it is read
// back from the segment (the page cache's copy, as a rule).
//
// A reservation that returned before its sync (Options.OneSync) is not
// waited for: the holder's write goes after it in the log, and its sync
// covers both (or, had the reservation's failed first, its frame holds
// the whole record anyway). Until then the reservation's frame may not
// be in its segment yet: its record is taken from memory.
func (s *Store) held(ctx context.Context, op string, f store.Fence, fn func(st *stripe, id keyID, slot int, cur *entry, r *store.Record) error) error {
	return s.withKeyAs(ctx, op, f.KeyHash, true, func(st *stripe, id keyID) error {
		own := s.ownPending(st, &id)
		slot, cur := lookup(st, &id)
		// Release also frees a failed record (an operator's way out of an
		// unknown outcome); every other write needs an in_progress one.
		if slot < 0 || !(cur.state == 1 || op == "release" && cur.state == 3) {
			return store.ErrLeaseLost
		}
		var r store.Record
		if own != nil && cur.seg == own.e.seg && cur.off == own.e.off {
			r = own.rec
			r.LeaseUntil = fromNanos(cur.lease)
		} else {
			var err error
			if r, err = s.read(&id, &cur); err != nil {
				return err
			}
		}
		if r.Token != f.Token {
			return store.ErrLeaseLost
		}
		if err := fn(st, id, slot, &cur, &r); err != nil {
			if own != nil && own.b == nil && !errors.Is(err, ErrTooLarge) {
				// The write that was to carry the reservation failed:
				// the reservation goes with it, as two frames of one
				// failed sync would.
				s.undo(st, own)
				s.forget(st, &id)
			}
			return err
		}
		if own != nil {
			// Written after the reservation, and durable: so is the
			// reservation, or the key's latest frame stands for it.
			s.forget(st, &id)
		}
		return nil
	})
}

// ownPending returns the holder's reservation of id that returned before
// its sync and whose sync has not ended (or whose frame is kept in
// memory), or nil; a sync that ended is settled. The stripe is held.
func (s *Store) ownPending(st *stripe, id *keyID) *pending {
	i := pendingOf(st, id)
	if i < 0 {
		return nil
	}
	own := &st.pend[i]
	if own.b == nil {
		return own
	}
	select {
	case <-own.b.done:
		// Done: settles without waiting. A frame a sweep wrote whose
		// sync failed leaves the reservation kept in memory again, or
		// written now.
		s.settlePending(st, id)
		if i := pendingOf(st, id); i >= 0 {
			return &st.pend[i]
		}
		return nil
	default:
		return own
	}
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.held(ctx, "renew", f, func(st *stripe, id keyID, slot int, _ *entry, r *store.Record) error {
		r.LeaseUntil = s.clock.Now().Add(lease)
		return s.put(st, id, slot, r, lease)
	})
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	return s.held(ctx, "complete", c.Fence, func(st *stripe, id keyID, slot int, _ *entry, r *store.Record) error {
		now := s.clock.Now()
		r.State, r.Value = c.State, c.Value
		r.UpdatedAt, r.ExpiresAt = now, now.Add(c.TTL)
		return s.put(st, id, slot, r, 0)
	})
}

// Release implements store.Store. It appends a delete entry, so that the
// released record does not come back when the log is replayed.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.held(ctx, "release", f, func(st *stripe, id keyID, slot int, cur *entry, _ *store.Record) error {
		bp := framePool.Get().(*[]byte)
		b, _ := appendFrame((*bp)[:0], kindDel, s.seq.Add(1), id, nil, 0)
		_, _, batch := s.log.append(b)
		*bp = b
		framePool.Put(bp)
		before := *cur
		s.index(st, slot, nil)
		if err := s.log.wait(batch); err != nil {
			s.index(st, -1, &before)
			return err
		}
		return nil
	})
}

// Writable returns nil if the store takes new reservations: no write has
// failed since the last that succeeded, or, after one failed, a write it
// tries now (a frame that changes nothing) succeeds; and the filesystem
// has Options.Headroom free. Otherwise it returns why not: an error
// matching store.ErrNoSpace while the disk is full or short of the
// headroom; reads work meanwhile. After a failed write it tries at most
// every 100 ms, and only once the filesystem reports the headroom free.
// The gateway's readiness check asks here.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("file: writable: %w", err)
	}
	defer s.closeMu.RUnlock()
	if s.log.unwritable.Load() == nil && s.log.broken.Load() == nil {
		return s.log.gate.Admit()
	}
	if err := s.log.admit(); err != nil {
		return err
	}
	// A delete of the zero key hash, which no record has: a frame that
	// changes nothing, written and synced as any other.
	b, _ := appendFrame(nil, kindDel, s.seq.Add(1), keyID{}, nil, 0)
	_, _, batch := s.log.append(b)
	if err := s.log.wait(batch); err != nil {
		return err
	}
	if p := s.log.unwritable.Load(); p != nil {
		return *p // written, and the room it found is gone again
	}
	return nil
}

// Close implements store.Store. It waits for the calls in progress, then
// closes the log and releases the directory. Every acknowledged write is
// already on disk: there is nothing to flush.
func (s *Store) Close() error {
	// Before closeMu: a sweep read-holds it.
	s.sweeper.Stop()
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.hub.WakeAll() // waiters poll, and find the store closed
	// Reservations that returned before their sync are made durable: a
	// Close is not a crash.
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		if err := s.settlePending(st, nil); err != nil {
			s.logger.Warn("file: a reservation not yet written could not be at close; its key is free at the next open", "err", err)
		}
		st.mu.Unlock()
	}
	// The next Open reads the index from here, not from the whole log.
	if err := s.snapshot(); err != nil {
		s.logger.Warn("file: no index snapshot at close; the next open replays the log", "err", err)
	}
	err := s.log.close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("file: close: %w", err)
	}
	return nil
}
