package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/internal/dirlock"
	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/expiry"
	"github.com/idem-dev/idem/store/internal/monoclock"
	"github.com/idem-dev/idem/store/internal/packed"
)

// ErrLocked is returned by Open when another process, or another Store in
// this one, has the directory open. The embedded stores share it.
var ErrLocked = dirlock.ErrLocked

// lockFile is the file, inside the directory, that Open locks.
const lockFile = "idem.lock"

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Logger receives recovery and compaction messages. Nil means
	// slog.Default().
	Logger *slog.Logger
	// SegmentBytes is the size past which the log starts a new segment
	// file. Zero means 64 MiB. Smaller segments are dropped and compacted
	// sooner; larger ones mean fewer files.
	SegmentBytes int64
	// WallClock is read once, when Open starts, to set the store's clock,
	// which then advances on the monotonic clock only (see "One clock" in
	// the package doc). Nil means time.Now.
	WallClock func() time.Time

	// now, in tests, replaces the store's clock: every instant is read
	// from it, jumps included.
	now func() time.Time
}

// Store is the embedded store. It is safe for concurrent use; Open it once
// per directory and share it.
type Store struct {
	log     *log
	lock    io.Closer // the directory's flock
	logger  *slog.Logger
	seq     atomic.Uint64 // the last entry's seq
	stripes [stripes]stripe
	exp     *expiry.Index[keyID]
	clock   *monoclock.Clock
	// opened is the store's clock when Open began: recovery holds a
	// record left in progress to at most its lease from then.
	opened time.Time

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
		log:    newLog(dir, opts.SegmentBytes),
		lock:   lock,
		logger: opts.Logger,
		exp:    expiry.New[keyID](),
		clock:  clock,
		opened: clock.Now(),
	}
	for i := range s.stripes {
		s.stripes[i].entries = map[keyID]entry{}
	}
	if err := s.recover(); err != nil {
		s.log.close()
		lock.Close()
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
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

// withKey runs fn holding keyHash's stripe, once ctx and Close allow.
func (s *Store) withKey(ctx context.Context, op, keyHash string, fn func(st *stripe, id keyID) error) error {
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
	if err := fn(st, id); err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	return nil
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// put appends r as id's latest frame, points the index at it, and returns
// once the frame is durable; if the frame could not be made durable, it
// points the index back at cur and returns the error. cur is id's entry
// before, or nil; lease is the lease r.LeaseUntil was set from. The stripe
// is held.
func (s *Store) put(st *stripe, id keyID, r *store.Record, p packed.Record, cur *entry, lease time.Duration) error {
	if uint64(len(r.Value)) > math.MaxUint32 {
		// Refused before copying it into a frame.
		return fmt.Errorf("%w: a value of %d bytes", ErrTooLarge, len(r.Value))
	}
	bp := framePool.Get().(*[]byte)
	seq := s.seq.Add(1)
	b, valAt := appendFrame((*bp)[:0], kindPut, seq, id, r, lease)
	if len(b) > math.MaxUint32 {
		return fmt.Errorf("%w: a record of %d bytes", ErrTooLarge, len(b))
	}
	seg, off, batch := s.log.append(b)
	e := entry{rec: p, seq: seq, seg: seg, off: off, size: uint32(len(b)), valAt: uint32(valAt), valLen: uint32(len(r.Value))}
	if cap(b) <= 64<<10 { // a 4 MiB response's buffer is not kept
		*bp = b
		framePool.Put(bp)
	}
	s.index(st, id, cur, &e)
	if err := s.log.wait(batch); err != nil {
		s.index(st, id, &e, cur)
		return err
	}
	return nil
}

// ErrTooLarge is returned for a record whose frame would pass 4 GiB.
var ErrTooLarge = errors.New("file: record too large")

// index points id at e (nil: removes it), keeping the segments' live bytes
// and the expiry index in step. The stripe is held.
func (s *Store) index(st *stripe, id keyID, cur, e *entry) {
	if cur != nil {
		cur.seg.live.Add(-int64(cur.size))
	}
	if e == nil {
		delete(st.entries, id) // its expiry item stays until Cleanup visits it
		return
	}
	e.seg.live.Add(int64(e.size))
	st.entries[id] = *e
	if cur == nil || !cur.rec.ExpiresSameAs(e.rec.ExpiresAt()) {
		s.exp.Add(id, e.rec.ExpiresAt())
	}
}

// record returns e's record as read at now, with its value read from its
// segment.
func (s *Store) record(e *entry, now time.Time) (store.Record, error) {
	r := e.rec.ReadAt(now)
	if e.valLen > 0 {
		r.Value = make([]byte, e.valLen)
		if _, err := e.seg.f.ReadAt(r.Value, e.off+int64(e.valAt)); err != nil {
			return store.Record{}, fmt.Errorf("read value of %s: %w", r.KeyHash, err)
		}
	}
	return r, nil
}

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	var res store.Reservation
	err := s.withKey(ctx, "reserve", req.Record.KeyHash, func(st *stripe, id keyID) error {
		now := s.clock.Now()
		cur, ok := st.entries[id]
		if ok && !cur.rec.Expired(now) {
			c := &cur.rec
			if !(req.TakeOverStale && c.Stale(now) &&
				c.Fingerprint() == req.Record.Fingerprint && c.Binding() == req.Record.Binding) {
				var err error
				res.Existing, err = s.record(&cur, now)
				return err
			}
			res.TookOver = true
		}
		// A log that cannot write refuses a new reservation at once,
		// rather than have work start whose outcome it cannot keep.
		if err := s.log.admit(); err != nil {
			return err
		}
		var before *entry
		if ok {
			before = &cur
		}
		r := req.Record
		r.State, r.Value = store.InProgress, nil
		r.CreatedAt, r.UpdatedAt = now, now
		r.ExpiresAt, r.LeaseUntil = now.Add(req.TTL), now.Add(req.Lease)
		if err := s.put(st, id, &r, packed.Pack(&r), before, req.Lease); err != nil {
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

// Get implements store.Store. It reads the index and the record's value
// only, so it works while the disk is full.
func (s *Store) Get(ctx context.Context, _, keyHash string) (store.Record, error) {
	var r store.Record
	err := s.withKey(ctx, "get", keyHash, func(st *stripe, id keyID) error {
		now := s.clock.Now()
		e, ok := st.entries[id]
		if !ok || e.rec.Expired(now) {
			return store.ErrNotFound
		}
		var err error
		r, err = s.record(&e, now)
		return err
	})
	if err != nil {
		return store.Record{}, err
	}
	return r, nil
}

// held runs fn on the in_progress entry that f's token holds, under its
// stripe, or returns ErrLeaseLost.
func (s *Store) held(ctx context.Context, op string, f store.Fence, fn func(st *stripe, id keyID, cur *entry) error) error {
	return s.withKey(ctx, op, f.KeyHash, func(st *stripe, id keyID) error {
		cur, ok := st.entries[id]
		// Release also frees a failed record (an operator's way out of an
		// unknown outcome); every other write needs an in_progress one.
		held := ok && cur.rec.Token == f.Token &&
			(cur.rec.State() == store.InProgress || op == "release" && cur.rec.State() == store.Failed)
		if !held {
			return store.ErrLeaseLost
		}
		return fn(st, id, &cur)
	})
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.held(ctx, "renew", f, func(st *stripe, id keyID, cur *entry) error {
		p := cur.rec
		p.SetLeaseUntil(s.clock.Now().Add(lease))
		r := p.Unpack()
		return s.put(st, id, &r, p, cur, lease)
	})
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	return s.held(ctx, "complete", c.Fence, func(st *stripe, id keyID, cur *entry) error {
		p := cur.rec
		now := s.clock.Now()
		p.Complete(c.State, now, now.Add(c.TTL))
		r := p.Unpack()
		r.Value = c.Value
		return s.put(st, id, &r, p, cur, 0)
	})
}

// Release implements store.Store. It appends a delete entry, so that the
// released record does not come back when the log is replayed.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.held(ctx, "release", f, func(st *stripe, id keyID, cur *entry) error {
		bp := framePool.Get().(*[]byte)
		b, _ := appendFrame((*bp)[:0], kindDel, s.seq.Add(1), id, nil, 0)
		_, _, batch := s.log.append(b)
		*bp = b
		framePool.Put(bp)
		s.index(st, id, cur, nil)
		if err := s.log.wait(batch); err != nil {
			s.index(st, id, nil, cur)
			return err
		}
		return nil
	})
}

// Writable returns nil if the store can write: no write has failed since
// the last that succeeded, or, after one failed, a write it tries now (a
// frame that changes nothing) succeeds. Otherwise it returns why not: an
// error matching store.ErrNoSpace while the disk is full; reads work
// meanwhile. It tries at most every 100 ms, and only once the filesystem
// reports 1 MiB free. A store opened on a full disk learns that it is
// full from its first write. The gateway's readiness check asks here.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("file: writable: %w", err)
	}
	defer s.closeMu.RUnlock()
	if s.log.unwritable.Load() == nil && s.log.broken.Load() == nil {
		return nil
	}
	if err := s.log.admit(); err != nil {
		return err
	}
	// A delete of the zero key hash, which no record has: a frame that
	// changes nothing, written and synced as any other.
	b, _ := appendFrame(nil, kindDel, s.seq.Add(1), keyID{}, nil, 0)
	_, _, batch := s.log.append(b)
	return s.log.wait(batch)
}

// Close implements store.Store. It waits for the calls in progress, then
// closes the log and releases the directory. Every acknowledged write is
// already on disk: there is nothing to flush.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.hub.WakeAll() // waiters poll, and find the store closed
	err := s.log.close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("file: close: %w", err)
	}
	return nil
}
