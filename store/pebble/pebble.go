package pebblestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/dirlock"
	"github.com/idem-dev/idem/store/internal/diskroom"
	"github.com/idem-dev/idem/store/internal/hold"
	"github.com/idem-dev/idem/store/internal/monoclock"
)

// ErrLocked is returned by Open when another process, or another Store in
// this one, has the directory open. The embedded stores share it.
var ErrLocked = dirlock.ErrLocked

// lockFile is the file, inside the directory, that Open locks.
const lockFile = "idem.lock"

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Logger receives the engine's messages (WAL recovery on open,
	// background errors) at Info level. Nil means slog.Default().
	Logger *slog.Logger

	// CacheSize is the engine's block cache, in bytes. Zero means 64 MiB.
	CacheSize int64

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
	// on_stale: retry) is kept in memory, under its key's stripe, where
	// every call of the process sees it, and written with its holder's
	// Complete in one synced batch (or by a Renew, or by Close). A crash
	// before that loses it, as it loses its holder, and the key is free
	// again (as on_stale: retry would make it after a lease). A
	// reservation that may not be taken over (on_stale: conflict) is
	// synced as before. The gateway sets it.
	OneSync bool
	// HoldFor bounds how long OneSync keeps a reservation in memory: one
	// held longer is committed, and the WAL synced once the key's stripe
	// is free again, by a goroutine that looks every half HoldFor (see
	// sweepHeld), so that a process killed during a slow call leaves the
	// key in progress, outcome unknown, rather than no trace of it. A call
	// that completes within the bound still makes one commit. Zero means
	// 50 ms (hold.Default); negative means a reservation is never kept
	// in memory: it is committed and synced at once.
	HoldFor time.Duration

	// now, in tests, replaces the store's clock: every instant is read
	// from it, jumps included.
	now func() time.Time
	// freeBytes, in tests, replaces the report of the room left on the
	// directory's filesystem.
	freeBytes func() (int64, error)
	// fs, in tests, wraps the engine's filesystem (to fail its writes).
	fs func(vfs.FS) vfs.FS
	// beforeCommit, in tests, runs in a write after the store decided
	// to take it and before the engine does.
	beforeCommit func()
	// beforeReopen, in tests, runs in the recovery before each reopen.
	beforeReopen func()
}

// Store is the embedded store. It is safe for concurrent use; Open it once
// per directory and share it.
type Store struct {
	dir   string
	opts  Options
	cache *pebble.Cache
	lock  io.Closer // the directory's flock
	seed  maphash.Seed
	clock *monoclock.Clock
	// opened is the store's clock at Open, and run a number drawn then
	// and written into every record: a record in progress of another run
	// was left by a holder gone with its process, and its lease is held
	// to at most its length from opened (see held).
	opened time.Time
	run    uint64

	// db is the engine, read-write or read-only; replaced under closeMu
	// held for writing, read under it held for reading, as are the fields
	// of the engine beside it: fs, its filesystem, which can take the
	// directory from it; fsCloser, which stops the disk-health checks of
	// that filesystem; stuck, closed once the engine cannot be closed
	// (see errEngineStuck); and failed, closed once a write of the engine
	// failed (see unread).
	db       *pebble.DB
	fs       *fencedFS
	fsCloser io.Closer
	readOnly bool
	stuck    *signal
	failed   *signal
	// leftBehind counts the stuck engines the store replaced (see
	// maxLeftBehind); guarded by closeMu.
	leftBehind int
	// retryAt is when the recovery may next try to open the engine
	// read-write, and backoff how long it waits after a failed try; only
	// the recovery goroutine touches them.
	retryAt time.Time
	backoff time.Duration

	// unwritable is why the store refuses writes, nil while it takes
	// them: the engine is open read-only, or a write failed and it is
	// being reopened so.
	unwritable atomic.Pointer[error]
	// recovering is set while the goroutine that reopens the engine
	// runs; stop ends it, bg waits for it.
	recovering atomic.Bool
	bgMu       sync.Mutex // orders starting the goroutine with Close
	stop       chan struct{}
	stopped    bool // guarded by bgMu
	bg         sync.WaitGroup

	// gate admits new reservations while the filesystem has the
	// headroom free (Options.Headroom).
	gate *diskroom.Gate

	// stripes guard each key's read-modify-write; see stripe.
	stripes [1024]sync.Mutex
	// pending holds, per stripe and guarded by it, the reservations kept
	// in memory until their completion (see pending); npending counts
	// them, so that sweeps skip the stripes while there are none.
	pending  [1024]map[string]*pending
	npending atomic.Int64
	// holdFor is Options.HoldFor's bound (see hold.Bound); sweeper
	// writes the pending reservations held longer (see sweepHeld).
	holdFor time.Duration
	sweeper *hold.Sweeper
	// cleanMu serializes Cleanup, the only caller that holds several
	// stripes at once, so that two of them cannot deadlock.
	cleanMu sync.Mutex
	scanned int // index entries Cleanup has read, for tests; guarded by cleanMu
	// closeMu is read-held by every method for its whole duration and
	// write-held by Close and by a reopen, which so wait for them.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu
}

var _ store.Store = (*Store)(nil)

// Open opens the store in dir, creating dir and an empty store if needed.
// It fails with an error matching ErrLocked while another process has the
// same directory open.
//
// On a disk too full for Pebble to open read-write (its WAL replay writes
// tables), Open opens the engine read-only: the store serves what it
// holds, refuses writes with an error matching store.ErrNoSpace, and
// reopens read-write by itself once there is room (see Writable). A new
// directory cannot be created on a full disk: Open then fails.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	lock, err := dirlock.Lock(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	s, err := open(dir, opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	s.lock = lock
	return s, nil
}

func open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 64 << 20
	}
	if opts.freeBytes == nil {
		opts.freeBytes = func() (int64, error) { return diskroom.FreeBytes(dir) }
	}
	clock := monoclock.New(opts.WallClock)
	if opts.now != nil {
		clock = monoclock.Stepped(opts.now)
	}
	var run [8]byte
	_, _ = rand.Read(run[:])
	s := &Store{dir: dir, opts: opts, seed: maphash.MakeSeed(), clock: clock, opened: clock.Now(),
		run: binary.BigEndian.Uint64(run[:]) | 1, stop: make(chan struct{})}
	s.gate = diskroom.New(opts.Headroom, opts.freeBytes)
	s.cache = pebble.NewCache(opts.CacheSize)
	err := s.openEngine(false)
	if err != nil && noRoom(err) {
		opts.Logger.Warn("pebble: the disk has no room to open the store read-write; opening it read-only, and read-write again once there is room", "dir", dir, "err", err)
		if rerr := s.openEngine(true); rerr == nil {
			werr := writeError(err)
			s.unwritable.Store(&werr)
			err = nil
		} else {
			err = fmt.Errorf("%w (and read-only: %w)", err, rerr)
		}
	}
	if err != nil {
		s.cache.Unref()
		return nil, err
	}
	if err := s.checkFormat(); err != nil {
		s.closeEngine()
		s.cache.Unref()
		return nil, err
	}
	if s.readOnly {
		s.recover()
	}
	s.holdFor = hold.Bound(opts.HoldFor)
	if opts.OneSync && !hold.AtOnce(s.holdFor) {
		s.sweeper = hold.Start(s.holdFor, s.sweepHeld)
	}
	return s, nil
}

// openEngine opens Pebble on the store's directory, read-only or not, as
// s.db; closeMu is write-held (or the store is not yet shared).
//
// Pebble leaves behind what an Open that fails has made: the goroutine of
// its disk-health checks, which the store therefore makes itself and
// stops, and the tables its WAL replay wrote before the disk filled,
// which take the room it lacked. openEngine removes those tables, unless
// the MANIFEST changed (it may name them).
func (s *Store) openEngine(readOnly bool) error {
	if readOnly {
		// A read-only engine serves its WAL as it finds it, without the
		// tables and sync a read-write open would write: a record that
		// reached the WAL in a group whose write failed is served too, so
		// it must be on disk first.
		if err := syncWAL(s.dir); err != nil {
			return err
		}
	}
	logger := s.opts.Logger
	base := vfs.Default
	if s.opts.fs != nil {
		base = s.opts.fs(base)
	}
	health, fsCloser := vfs.WithDiskHealthChecks(base, 5*time.Second, func(info vfs.DiskSlowInfo) {
		logger.Warn("pebble: slow disk", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
	})
	fs := newFencedFS(health)
	// A Fatalf in a goroutine of an engine the store left behind is not
	// the current engine's failure.
	fatal := func(err error) {
		if !fs.isFenced() {
			s.engineFailed(err)
		}
	}
	o := engineOptions(s.cache, pebbleLogger{l: logger, fatal: fatal})
	o.ReadOnly = readOnly
	o.FS = fs
	before := engineFiles(s.dir)
	var db *pebble.DB
	err := guard(func() (err error) {
		db, err = pebble.Open(s.dir, o)
		return err
	})
	if err != nil {
		// What a failed Open left open, its lock on the directory
		// included, would keep the next Open out.
		fs.fence()
		fsCloser.Close()
		if !readOnly {
			s.removeLeftovers(before)
		}
		return err
	}
	s.db, s.fs, s.fsCloser, s.readOnly, s.stuck, s.failed = db, fs, fsCloser, readOnly, newSignal(), newSignal()
	return nil
}

// engineFiles lists the directory's files with their sizes.
func engineFiles(dir string) map[string]int64 {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	files := map[string]int64{}
	for _, de := range des {
		if fi, err := de.Info(); err == nil {
			files[de.Name()] = fi.Size()
		}
	}
	return files
}

// removeLeftovers removes the tables that a failed Open wrote, which were
// not in before, if no MANIFEST or CURRENT changed since.
func (s *Store) removeLeftovers(before map[string]int64) {
	if before == nil {
		return
	}
	after := engineFiles(s.dir)
	var tables []string
	for name, size := range after {
		old, ok := before[name]
		switch {
		case strings.HasPrefix(name, "MANIFEST-") || name == "CURRENT":
			if !ok || old != size {
				return // the failed Open may have recorded its tables
			}
		case !ok && strings.HasSuffix(name, ".sst"):
			tables = append(tables, name)
		}
	}
	for _, name := range tables {
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
			s.opts.Logger.Info("pebble: removing a table left by a failed open", "file", name, "err", err)
		}
	}
}

// syncWAL syncs the engine's WAL files to disk.
func syncWAL(dir string) error {
	for name := range engineFiles(dir) {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pebble: sync %s: %w", name, err)
		}
	}
	return nil
}

// walBytes is the size of the engine's WAL files: reopening read-write
// writes their records out as tables, and needs about that much room.
func walBytes(dir string) int64 {
	var n int64
	for name, size := range engineFiles(dir) {
		if strings.HasSuffix(name, ".log") {
			n += size
		}
	}
	return n
}

// errEngineStuck: the engine cannot be closed after a failed write.
// Pebble fails a WAL write it cannot make (a full disk) by panicking out
// of its commit pipeline, and when that happens inside the pipeline (a
// commit that finds the WAL already failed, or a new WAL that cannot be
// created) the pipeline's lock stays held: every later commit, and the
// engine's Close, would wait for it forever. guard turns the panic into
// the call's error and tells the engine stuck; the writes waiting on it
// fail at once, and the recovery replaces the engine rather than close it
// (closeEngine).
var errEngineStuck = errors.New("pebble: the engine is stuck after a failed write")

// errRestart: the store keeps a stuck engine for reads, having left
// maxLeftBehind behind already.
var errRestart = errors.New("restart the process to write again")

// closeWait bounds how long closeEngine waits for the engine's Close;
// an engine that takes longer is treated as stuck.
const closeWait = 10 * time.Second

// maxLeftBehind bounds the stuck engines a process leaves behind, each
// with its memtables (up to twice MemTableSize): past it the store keeps
// the stuck engine for reads, and writes again after a restart.
const maxLeftBehind = 4

// closeEngine closes the engine; closeMu is write-held (or the store is
// not yet shared). A stuck engine (one found stuck, or that does not close
// within closeWait) is not closed: fencing its filesystem takes the
// directory from it, and the store leaves it behind, so that a new engine
// can open. Past maxLeftBehind, the stuck engine is kept, serving reads,
// and errRestart returned.
func (s *Store) closeEngine() error {
	if s.db == nil {
		return nil
	}
	if !s.stuck.isSet() {
		db := s.db
		closed := make(chan error, 1)
		go func() { closed <- guard(db.Close) }()
		select {
		case err := <-closed:
			s.db = nil
			s.fsCloser.Close()
			return err
		case <-time.After(closeWait):
			s.stuck.set()
		}
	}
	if s.leftBehind >= maxLeftBehind && !s.closed {
		return fmt.Errorf("%w; %d left behind already: %w", errEngineStuck, s.leftBehind, errRestart)
	}
	s.fs.fence()
	s.fsCloser.Close()
	s.db = nil
	s.leftBehind++
	return errEngineStuck
}

// signal is a flag set once, that can be waited on.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func newSignal() *signal { return &signal{c: make(chan struct{})} }

func (g *signal) set() { g.once.Do(func() { close(g.c) }) }

func (g *signal) isSet() bool {
	select {
	case <-g.c:
		return true
	default:
		return false
	}
}

// engineOptions is the store's Pebble configuration, shared with the raw
// engine benchmark that the store is measured against.
func engineOptions(cache *pebble.Cache, logger pebble.Logger) *pebble.Options {
	o := &pebble.Options{
		Cache:  cache,
		Logger: logger,
		// Stored responses reach 4 MiB (max_response_bytes). Pebble's 4 MiB
		// default memtable would flush on every such Complete: a batch over
		// half the memtable is flushed on its own.
		MemTableSize: 32 << 20,
		Levels:       make([]pebble.LevelOptions, 7),
	}
	for i := range o.Levels {
		// Nearly every Reserve looks up a key that does not exist yet. A
		// Bloom filter per table answers that without reading its blocks.
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return o
}

// checkFormat stamps a new store with the format version and refuses one
// written in a format this code does not know.
func (s *Store) checkFormat() error {
	v, closer, err := s.db.Get(formatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if s.readOnly {
			return nil
		}
		return s.commit(func(db *pebble.DB) error { return db.Set(formatKey, formatValue, pebble.Sync) })
	case err != nil:
		return err
	}
	defer closer.Close()
	if !bytes.Equal(v, formatValue) {
		return fmt.Errorf("%w: format %x, want %x (written by another version?)", ErrCorrupt, v, formatValue)
	}
	return nil
}

// begin starts a method: it checks ctx and read-locks closeMu. On success
// the caller must call s.closeMu.RUnlock.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return store.ErrClosed
	}
	if s.db == nil {
		// A reopen failed both ways; the recovery goroutine tries again.
		err := *s.unwritable.Load()
		s.closeMu.RUnlock()
		return err
	}
	return nil
}

// beginRead is begin for a method that reads records. An engine one of
// whose writes failed is never read (see unread): beginRead waits until
// the recovery has replaced it, which it does at once.
func (s *Store) beginRead(ctx context.Context) error {
	for {
		if err := s.begin(ctx); err != nil {
			return err
		}
		if !s.failed.isSet() {
			return nil
		}
		err := *s.unwritable.Load()
		s.closeMu.RUnlock()
		if errors.Is(err, errRestart) {
			// Kept past maxLeftBehind: it is never replaced.
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(unreadPoll):
		}
	}
}

// unread: an engine a write of which failed is not read again. Pebble
// applies a batch to its memtable, and makes it visible to reads, before
// the WAL's write and sync of it are known to have succeeded: a batch
// whose WAL write failed stays readable in that engine although it is not
// on disk (nor, often, in the WAL at all). Reading it would let a caller
// treat an outcome whose write failed as recorded (the engine's check of
// a completion it retries, a replay): after a restart it would be gone.
// Every write holds its key's stripe until its commit returns, and marks
// the engine failed before that, so no read of the key can see the batch
// before the mark; reads then wait for the engine reopened from its
// files (recover), which holds only what reached them.
//
// unreadPoll is how often a read waiting for that reopen looks again.
const unreadPoll = time.Millisecond

// stripe returns the mutex guarding keyHash.
//
// Pebble has no transactions: a Get followed by a batch Commit is not
// atomic, so two Reserves of one key could both see it absent. Every
// read-modify-write of a key holds its stripe from the read until its
// synced commit returns. One global mutex would do the same but serialize
// every commit, and with it every fsync; stripes let writers of different
// keys commit together, which is what lets Pebble group their WAL syncs.
// Holding the stripe through the sync also means that no reader of the key
// (Get takes it too) sees a write that a crash could still undo, but for
// a reservation under Options.OneSync, kept in memory (see pending), which
// a crash undoes together with its holder.
func (s *Store) stripe(keyHash string) *sync.Mutex {
	return &s.stripes[s.stripeIndex(keyHash)]
}

func (s *Store) stripeIndex(keyHash string) int {
	return int(maphash.String(s.seed, keyHash) % uint64(len(s.stripes)))
}

// withKey runs fn holding keyHash's stripe, once ctx and Close allow.
// A call that answers from the record (Get, Reserve) is a read: it waits
// for the engine that replaces one a write of which failed (see unread).
// One that only writes, after it checked the record (Complete, Renew,
// Release), fails at once then, since the store refuses writes.
func (s *Store) withKey(ctx context.Context, keyHash string, read bool, fn func() error) error {
	for {
		begin := s.begin
		if read {
			begin = s.beginRead
		}
		if err := begin(ctx); err != nil {
			return err
		}
		mu := s.stripe(keyHash)
		mu.Lock()
		if s.failed.isSet() {
			// A write of this stripe may have failed while we waited for
			// it: its batch may be readable (see unread).
			err := *s.unwritable.Load()
			mu.Unlock()
			s.closeMu.RUnlock()
			if !read {
				return err
			}
			continue
		}
		// The wait for the stripe may have outlasted ctx: do nothing then.
		err := ctx.Err()
		if err == nil {
			err = fn()
		}
		mu.Unlock()
		s.closeMu.RUnlock()
		return err
	}
}

// read returns the stored record for keyHash, expired or not, or nil. A
// record in progress written by another run of the store has its lease
// held to at most its length from this run's Open: its holder died with
// that run, and its LeaseUntil is on that run's clock, which the wall
// clock read at this Open may be far behind.
func (s *Store) read(keyHash string) (*store.Record, error) {
	v, closer, err := s.db.Get(recKey(keyHash))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	r, meta, err := decodeRecord(keyHash, v)
	if err != nil {
		return nil, err
	}
	if r.State == store.InProgress && meta.run != s.run {
		if bound := s.opened.Add(max(meta.lease, 0)); r.LeaseUntil.After(bound) {
			r.LeaseUntil = bound
		}
	}
	return r, nil
}

// write commits r, replacing old (nil when absent: what the engine holds
// for the key), with its expiry index entry, and returns once the commit
// is on disk. lease is the lease r.LeaseUntil was set from.
func (s *Store) write(r, old *store.Record, lease time.Duration) error {
	return s.commit(func(db *pebble.DB) error {
		b := db.NewBatch()
		defer b.Close()
		if err := s.addRecord(b, r, old, lease); err != nil {
			return err
		}
		// The WAL takes about the batch's size: the gate's reading of the
		// room left is that much less until its next one.
		s.gate.Wrote(len(b.Repr()))
		return b.Commit(pebble.Sync)
	})
}

// addRecord adds to b the writes of r replacing old (nil when absent):
// the record and its expiry index entry.
func (s *Store) addRecord(b *pebble.Batch, r, old *store.Record, lease time.Duration) error {
	if err := b.Set(recKey(r.KeyHash), encodeRecord(r, meta{lease: lease, run: s.run}), nil); err != nil {
		return err
	}
	if old != nil && old.ExpiresAt.Equal(r.ExpiresAt) {
		return nil
	}
	if old != nil {
		if err := b.Delete(expKey(old.ExpiresAt, old.KeyHash), nil); err != nil {
			return err
		}
	}
	return b.Set(expKey(r.ExpiresAt, r.KeyHash), nil, nil)
}

// commit runs fn, which commits to the engine, unless the store refuses
// writes. A commit that fails (Pebble reports a failed WAL write or sync
// through its logger's Fatalf, which guard turns into an error here)
// leaves Pebble's WAL unusable: the store stops writing and reopens the
// engine read-only, then read-write once there is room (recover).
//
// The engine commits on a goroutine of its own, so that a write the
// engine would hold forever (errEngineStuck) fails once the engine is
// found stuck, and lets the store replace it.
func (s *Store) commit(fn func(db *pebble.DB) error) error {
	if err := s.writable(); err != nil {
		return err
	}
	if s.opts.beforeCommit != nil {
		s.opts.beforeCommit()
	}
	db, stuck, failed := s.db, s.stuck, s.failed
	done := make(chan error, 1)
	go func() { done <- guard(func() error { return fn(db) }) }()
	var err error
	select {
	case err = <-done:
	case <-stuck.c:
		err = errEngineStuck
	}
	if f := (fatalError{}); errors.As(err, &f) && f.locked {
		stuck.set()
	}
	if err != nil {
		s.engineFailed(err)
		// Before the key's stripe is released: the failed batch may be
		// readable in this engine (see unread). Under closeMu read-held,
		// the recovery cannot yet have cleared unwritable.
		failed.set()
		if p := s.unwritable.Load(); p != nil {
			return *p
		}
	}
	return err
}

// writable returns why the store refuses writes, or nil.
func (s *Store) writable() error {
	if p := s.unwritable.Load(); p != nil {
		return *p
	}
	if s.readOnly {
		return fmt.Errorf("pebble: write: %w", pebble.ErrReadOnly)
	}
	return nil
}

// engineFailed records that a write failed (or that Pebble called Fatalf
// in a goroutine of its own) and starts the recovery.
func (s *Store) engineFailed(err error) {
	werr := writeError(err)
	s.unwritable.CompareAndSwap(nil, &werr)
	s.recover()
}

// recover starts the goroutine that reopens the engine read-only, then
// read-write once the disk has room, unless it runs already.
func (s *Store) recover() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.stopped || !s.recovering.CompareAndSwap(false, true) {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(retryEvery)
		defer t.Stop()
		for first := true; ; first = false {
			if !first {
				select {
				case <-s.stop:
					s.recovering.Store(false)
					return
				case <-t.C:
				}
			}
			done, stop := s.reopen()
			if stop {
				s.recovering.Store(false)
				return
			}
			if done {
				s.recovering.Store(false)
				// A write that failed after the reopen and before the
				// flag cleared found the recovery running, and did not
				// start it: start it for that write.
				if s.unwritable.Load() != nil {
					s.recover()
				}
				return
			}
		}
	}()
}

// retryEvery is how often an unwritable store checks whether it can
// reopen its engine read-write. It tries once its filesystem has room for
// the tables of its WAL and the headroom more, and after a failed try
// waits twice as long as after the one before, up to maxBackoff: each try
// replays the whole WAL.
const (
	retryEvery = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// reopen, with closeMu write-held, moves a failed read-write engine to a
// read-only one, and a read-only one to read-write when the disk has room.
// It reports done once the store writes again, and stop once it is closed.
func (s *Store) reopen() (done, stop bool) {
	if s.opts.beforeReopen != nil {
		s.opts.beforeReopen()
	}
	free, ferr := s.opts.freeBytes()
	need := walBytes(s.dir) + s.gate.Headroom()
	try := (ferr != nil || free >= need) && !time.Now().Before(s.retryAt)
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return false, true
	}
	if s.db != nil && s.readOnly && !try {
		return false, false
	}
	if err := s.closeEngine(); errors.Is(err, errRestart) {
		werr := fmt.Errorf("pebble: write: %w: %w", store.ErrNoSpace, err)
		s.unwritable.Store(&werr)
		s.opts.Logger.Error("pebble: the store serves reads only until the process restarts", "dir", s.dir, "err", err)
		return false, true
	} else if errors.Is(err, errEngineStuck) {
		s.opts.Logger.Warn("pebble: left behind an engine stuck after a failed write, to open a new one; its memory stays held until the process exits",
			"dir", s.dir, "left behind", s.leftBehind)
	} else if err != nil {
		s.opts.Logger.Info("pebble: closing the engine after a failed write", "err", err)
	}
	if try {
		err := s.openEngine(false)
		if err == nil {
			s.unwritable.Store(nil)
			s.backoff = 0
			s.opts.Logger.Info("pebble: the store writes again", "dir", s.dir)
			return true, false
		}
		s.backoff = min(max(2*s.backoff, retryEvery), maxBackoff)
		s.retryAt = time.Now().Add(s.backoff)
		s.opts.Logger.Info("pebble: cannot reopen read-write yet", "err", err, "next try in", s.backoff)
		werr := writeError(err)
		s.unwritable.Store(&werr)
	}
	if err := s.openEngine(true); err != nil {
		s.opts.Logger.Error("pebble: cannot reopen the store, even read-only", "dir", s.dir, "err", err)
	}
	return false, false
}

// Writable returns nil if the store takes new reservations, or why not:
// an error matching store.ErrNoSpace while its disk is full or has less
// than Options.Headroom free. It never writes: a store that stopped
// writing reopens its engine read-only at once, and read-write by itself,
// trying every 100 ms once the filesystem has room for its WAL as tables
// and the headroom. The gateway's readiness check asks here.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("pebble: writable: %w", err)
	}
	defer s.closeMu.RUnlock()
	if p := s.unwritable.Load(); p != nil {
		return *p
	}
	return s.gate.Admit()
}

// writeError wraps a failed write of the engine; a full disk matches
// store.ErrNoSpace as well as the system's error.
func writeError(err error) error {
	if noSpace(err) {
		return fmt.Errorf("pebble: write: %w: %w", store.ErrNoSpace, err)
	}
	return fmt.Errorf("pebble: write: %w", err)
}

func noSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	// Pebble's Fatalf carries the message only.
	var f fatalError
	return errors.As(err, &f) && strings.Contains(f.msg, syscall.ENOSPC.Error())
}

// noRoom reports whether an Open failed for want of a writable disk, so
// that opening read-only may serve what the store holds.
func noRoom(err error) bool {
	return noSpace(err) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO)
}

// remove deletes r and its index entry in b.
func remove(b *pebble.Batch, r *store.Record) error {
	if err := b.Delete(recKey(r.KeyHash), nil); err != nil {
		return err
	}
	return b.Delete(expKey(r.ExpiresAt, r.KeyHash), nil)
}

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	var res store.Reservation
	err := s.withKey(ctx, req.Record.KeyHash, true, func() error {
		now := s.clock.Now()
		cur, disk, p, err := s.current(req.Record.KeyHash)
		if err != nil {
			return err
		}
		if cur != nil && now.Before(cur.ExpiresAt) {
			cur.SetReadAt(now)
			if !(req.TakeOverStale && cur.Stale() &&
				cur.Fingerprint == req.Record.Fingerprint && cur.Binding == req.Record.Binding) {
				res.Existing = *cur
				return nil
			}
			res.TookOver = true
		}
		// No new work without room for its outcome (see diskroom).
		if err := s.gate.Admit(); err != nil {
			return err
		}
		r := req.Record
		r.State, r.Value = store.InProgress, nil
		r.CreatedAt, r.UpdatedAt = now, now
		r.ExpiresAt, r.LeaseUntil = now.Add(req.TTL), now.Add(req.Lease)
		// With OneSync, excluding every other caller takes the
		// reservation kept under the stripe; its holder's Complete writes
		// it (see pending).
		if s.opts.OneSync && req.TakeOverStale && !hold.AtOnce(s.holdFor) {
			if err := s.writable(); err != nil {
				return err
			}
			s.hold(r.KeyHash, &pending{rec: r, lease: req.Lease, old: disk, tick: s.sweeper.Now()})
			res.Acquired = true
			return nil
		}
		if err := s.write(&r, disk, req.Lease); err != nil {
			return err
		}
		if p != nil {
			s.drop(r.KeyHash)
		}
		res.Acquired = true
		return nil
	})
	if err != nil {
		return store.Reservation{}, fmt.Errorf("pebble: reserve: %w", err)
	}
	return res, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, _, keyHash string) (store.Record, error) {
	var r *store.Record
	var now time.Time
	err := s.withKey(ctx, keyHash, true, func() (err error) {
		now = s.clock.Now()
		r, _, _, err = s.current(keyHash)
		return err
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("pebble: get: %w", err)
	}
	if r == nil || !now.Before(r.ExpiresAt) {
		return store.Record{}, store.ErrNotFound
	}
	r.SetReadAt(now)
	return *r, nil
}

// held runs fn on the in_progress record that f's token holds, under its
// stripe, or returns ErrLeaseLost; fn is given the record the engine holds
// too, and the pending reservation (see current).
func (s *Store) held(ctx context.Context, op string, f store.Fence, fn func(cur, disk *store.Record, p *pending) error) error {
	err := s.withKey(ctx, f.KeyHash, false, func() error {
		cur, disk, p, err := s.current(f.KeyHash)
		if err != nil {
			return err
		}
		// Release also frees a failed record (an operator's way out of an
		// unknown outcome); every other write needs an in_progress one.
		held := cur != nil && cur.Token == f.Token &&
			(cur.State == store.InProgress || op == "release" && cur.State == store.Failed)
		if !held {
			return store.ErrLeaseLost
		}
		return fn(cur, disk, p)
	})
	if err != nil {
		return fmt.Errorf("pebble: %s: %w", op, err)
	}
	return nil
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.held(ctx, "renew", f, func(cur, disk *store.Record, p *pending) error {
		r := *cur
		r.LeaseUntil = s.clock.Now().Add(lease)
		// A renewal is durable, a pending reservation's too: it is
		// written now, and kept no longer.
		if err := s.write(&r, disk, lease); err != nil {
			return err
		}
		if p != nil {
			s.drop(f.KeyHash)
		}
		return nil
	})
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	return s.held(ctx, "complete", c.Fence, func(cur, disk *store.Record, p *pending) error {
		r := *cur
		now := s.clock.Now()
		r.State, r.Value, r.UpdatedAt, r.ExpiresAt = c.State, c.Value, now, now.Add(c.TTL)
		if err := s.write(&r, disk, 0); err != nil {
			return err
		}
		if p != nil {
			s.drop(c.KeyHash)
		}
		return nil
	})
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.held(ctx, "release", f, func(cur, disk *store.Record, p *pending) error {
		if p != nil {
			if disk == nil {
				s.drop(f.KeyHash)
				return nil
			}
			// The record it took over would be seen again.
			cur = disk
		}
		err := s.commit(func(db *pebble.DB) error {
			b := db.NewBatch()
			defer b.Close()
			if err := remove(b, cur); err != nil {
				return err
			}
			return b.Commit(pebble.Sync)
		})
		if err == nil && p != nil {
			s.drop(f.KeyHash)
		}
		return err
	})
}

// cleanupChunk is how many index entries Cleanup handles per commit.
const cleanupChunk = 256

// Cleanup implements store.Store. It walks the expiry index from its start
// up to now, so it reads only entries that are due, never a live record's.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("pebble: cleanup: %w", err)
	}
	defer s.closeMu.RUnlock()
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	from := expPrefix
	now := s.clock.Now()
	// Exclusive bound: every entry whose time is not after now.
	upTo := appendTime(bytes.Clone(expPrefix), now.Add(time.Nanosecond))
	n := 0
	for limit <= 0 || n < limit {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("pebble: cleanup: %w", err)
		}
		chunk := cleanupChunk
		if limit > 0 {
			chunk = min(chunk, limit-n)
		}
		deleted, next, err := s.cleanup(from, upTo, chunk)
		n += deleted
		if err != nil {
			return n, fmt.Errorf("pebble: cleanup: %w", err)
		}
		if next == nil {
			break
		}
		// Start after what was just deleted, rather than skip its
		// tombstones again.
		from = next
	}
	if limit <= 0 || n < limit {
		n += s.sweepPending(now, limit-n)
	}
	return n, nil
}

// cleanup deletes the records of up to max index entries in [from, upTo)
// in one synced commit. It returns how many records it deleted and where
// the next chunk starts, nil when the range is done.
func (s *Store) cleanup(from, upTo []byte, max int) (deleted int, next []byte, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: upTo})
	if err != nil {
		return 0, nil, err
	}
	var keys [][]byte
	for ok := it.First(); ok && len(keys) < max; ok = it.Next() {
		keys = append(keys, bytes.Clone(it.Key()))
	}
	if err := it.Close(); err != nil {
		return 0, nil, err
	}
	s.scanned += len(keys)
	if len(keys) == 0 {
		return 0, nil, nil
	}
	// Each key's stripe is held until the commit is durable, as in every
	// other write: a Reserve that replaces an expired record between our
	// read and our commit would otherwise lose its new record.
	var held [len(s.stripes)]bool
	defer func() {
		for i, h := range held {
			if h {
				s.stripes[i].Unlock()
			}
		}
	}()
	b := s.db.NewBatch()
	defer b.Close()
	// The pending reservations that took over a record deleted here.
	var shadowing []*pending
	for _, k := range keys {
		at, keyHash, ok := parseExpKey(k)
		if !ok {
			return 0, nil, fmt.Errorf("%w: index key %q", ErrCorrupt, k)
		}
		i := s.stripeIndex(keyHash)
		if !held[i] {
			s.stripes[i].Lock()
			held[i] = true
			if s.failed.isSet() {
				// A write that failed may be readable (see unread).
				return 0, nil, *s.unwritable.Load()
			}
		}
		r, err := s.read(keyHash)
		if err != nil {
			return 0, nil, err
		}
		if r != nil && r.ExpiresAt.Equal(at) {
			// The entry is the record's, and due: the record is expired.
			if err := remove(b, r); err != nil {
				return 0, nil, err
			}
			if p := s.pending[i][keyHash]; p != nil {
				// The key is live: its pending reservation replaced r.
				shadowing = append(shadowing, p)
			} else {
				deleted++
			}
		} else if err := b.Delete(k, nil); err != nil {
			// The record was rewritten or removed after the iterator
			// listed the entry, and that same batch deleted the entry:
			// deleting it again is a no-op kept for safety.
			return 0, nil, err
		}
	}
	if err := s.commit(func(*pebble.DB) error { return b.Commit(pebble.Sync) }); err != nil {
		return 0, nil, err
	}
	for _, p := range shadowing {
		p.old = nil
	}
	if len(keys) < max {
		return deleted, nil, nil
	}
	return deleted, append(keys[len(keys)-1], 0), nil
}

// Close implements store.Store. It waits for the calls in progress, then
// closes the engine and releases the directory.
func (s *Store) Close() error {
	// Before closeMu: a sweep read-holds it.
	s.sweeper.Stop()
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.bgMu.Lock()
	s.stopped = true
	close(s.stop)
	s.bgMu.Unlock()
	if err := s.writePending(); err != nil {
		s.opts.Logger.Warn("pebble: close: the reservations of calls under way were not written; they are lost as in a crash", "err", err)
	}
	err := s.closeEngine()
	s.closeMu.Unlock()
	s.bg.Wait()
	s.cache.Unref()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}

// pebbleLogger sends Pebble's messages to slog.
type pebbleLogger struct {
	l     *slog.Logger
	fatal func(error) // told of a Fatalf outside the store's own calls
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "store", "pebble")
}

// Fatalf is called when Pebble cannot go on: an engine invariant
// violated, or a write of its WAL or MANIFEST that failed, which Pebble
// does not retry. Pebble's default logger exits the process; this one
// does not. In a call of the store's own (see guard) it panics, and guard
// turns the panic into that call's error: Fatalf must not return there,
// for Pebble would then report the failed commit as done. In Pebble's
// own goroutines (a flush, a compaction) a panic could not be caught:
// Fatalf tells the store, which stops writing and reopens the engine,
// and returns, and Pebble returns the error to the job that failed.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "store", "pebble")
	if guarded() {
		panic(fatalError{msg: msg})
	}
	if p.fatal != nil {
		p.fatal(fatalError{msg: msg})
	}
}

// fatalError is a Fatalf of Pebble's, as an error, or a panic of
// Pebble's own with an error (locked: see errEngineStuck).
type fatalError struct {
	msg    string
	locked bool
}

func (f fatalError) Error() string {
	if strings.HasPrefix(f.msg, "pebble: ") {
		return f.msg
	}
	return "pebble: " + f.msg
}

// guard runs fn, which calls into Pebble, and returns a Fatalf of
// Pebble's during it as an error. Pebble's commit also panics with the
// error itself when its WAL write fails (a full disk): that is returned as
// a fatal error too, locked, for Pebble may have left its locks held, and
// the store stops writing and replaces the engine.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			switch f := r.(type) {
			case fatalError:
				err = f
			case error:
				err = fatalError{msg: f.Error(), locked: true}
			default:
				panic(r)
			}
		}
	}()
	return fn()
}

// guarded reports whether the calling goroutine runs inside guard.
func guarded() bool {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == guardFunc {
			return true
		}
		if !more {
			return false
		}
	}
}

// guardFunc is the full name of guard, as runtime.Frame reports it.
const guardFunc = "github.com/idem-dev/idem/store/pebble.guard"

// CountExpired counts the records that have expired by walking the expiry
// index, so it costs what a Cleanup would (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	if err := s.beginRead(ctx); err != nil {
		return 0, fmt.Errorf("pebble: count expired: %w", err)
	}
	defer s.closeMu.RUnlock()
	now := s.clock.Now()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: expPrefix, UpperBound: appendTime(bytes.Clone(expPrefix), now.Add(time.Nanosecond))})
	if err != nil {
		return 0, fmt.Errorf("pebble: count expired: %w", err)
	}
	n := s.countPending(now)
	for ok := it.First(); ok; ok = it.Next() {
		if n%4096 == 0 && ctx.Err() != nil {
			it.Close()
			return n, fmt.Errorf("pebble: count expired: %w", ctx.Err())
		}
		n++
	}
	return n, it.Close()
}
