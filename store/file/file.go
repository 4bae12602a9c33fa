package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/idem-dev/idem/store"
)

// ErrLocked is returned by Open when another process, or another Store in
// this one, has the directory open.
var ErrLocked = errors.New("another process holds the store directory")

// lockFile is the file, inside the directory, that Open locks.
const lockFile = "idem.lock"

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Logger receives the engine's messages (WAL recovery on open,
	// background errors) at Info level. Nil means slog.Default().
	Logger *slog.Logger

	// CacheSize is the engine's block cache, in bytes. Zero means 64 MiB.
	CacheSize int64
}

// Store is the embedded store. It is safe for concurrent use; Open it once
// per directory and share it.
type Store struct {
	db   *pebble.DB
	lock io.Closer // the directory's flock
	seed maphash.Seed

	// stripes guard each key's read-modify-write; see stripe.
	stripes [1024]sync.Mutex
	// cleanMu serializes Cleanup, the only caller that holds several
	// stripes at once, so that two of them cannot deadlock.
	cleanMu sync.Mutex
	scanned int // index entries Cleanup has read, for tests; guarded by cleanMu
	// closeMu is read-held by every method for its whole duration and
	// write-held by Close, which so waits for them before closing the engine.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu
}

var _ store.Store = (*Store)(nil)

// Open opens the store in dir, creating dir and an empty store if needed.
// It fails with an error matching ErrLocked while another process has the
// same directory open.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	lock, err := lockDir(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	s, err := open(dir, opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
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
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref() // the DB holds its own reference
	db, err := pebble.Open(dir, engineOptions(cache, pebbleLogger{opts.Logger}))
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, seed: maphash.MakeSeed()}
	if err := s.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
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
		return s.db.Set(formatKey, formatValue, pebble.Sync)
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
	return nil
}

// stripe returns the mutex guarding keyHash.
//
// Pebble has no transactions: a Get followed by a batch Commit is not
// atomic, so two Reserves of one key could both see it absent. Every
// read-modify-write of a key holds its stripe from the read until its
// synced commit returns. One global mutex would do the same but serialize
// every commit, and with it every fsync; stripes let writers of different
// keys commit together, which is what lets Pebble group their WAL syncs.
// Holding the stripe through the sync also means that no reader of the key
// (Get takes it too) sees a write that a crash could still undo.
func (s *Store) stripe(keyHash string) *sync.Mutex {
	return &s.stripes[s.stripeIndex(keyHash)]
}

func (s *Store) stripeIndex(keyHash string) int {
	return int(maphash.String(s.seed, keyHash) % uint64(len(s.stripes)))
}

// withKey runs fn holding keyHash's stripe, once ctx and Close allow.
func (s *Store) withKey(ctx context.Context, keyHash string, fn func() error) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	mu := s.stripe(keyHash)
	mu.Lock()
	defer mu.Unlock()
	// The wait for the stripe may have outlasted ctx: do nothing then.
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn()
}

// read returns the stored record for keyHash, expired or not, or nil.
func (s *Store) read(keyHash string) (*store.Record, error) {
	v, closer, err := s.db.Get(recKey(keyHash))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeRecord(keyHash, v)
}

// write commits r, replacing old (nil when absent), with its expiry index
// entry, and returns once the commit is on disk.
func (s *Store) write(r, old *store.Record) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(recKey(r.KeyHash), encodeRecord(r), nil); err != nil {
		return err
	}
	if old == nil || !old.ExpiresAt.Equal(r.ExpiresAt) {
		if old != nil {
			if err := b.Delete(expKey(old.ExpiresAt, old.KeyHash), nil); err != nil {
				return err
			}
		}
		if err := b.Set(expKey(r.ExpiresAt, r.KeyHash), nil, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
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
	err := s.withKey(ctx, req.Record.KeyHash, func() error {
		cur, err := s.read(req.Record.KeyHash)
		if err != nil {
			return err
		}
		if cur != nil && !cur.Expired(req.Now) {
			if !(req.TakeOverStale && cur.Stale(req.Now) &&
				cur.Fingerprint == req.Record.Fingerprint && cur.Binding == req.Record.Binding) {
				res.Existing = *cur
				return nil
			}
			res.TookOver = true
		}
		r := req.Record
		r.State, r.Value = store.InProgress, nil
		if err := s.write(&r, cur); err != nil {
			return err
		}
		res.Acquired = true
		return nil
	})
	if err != nil {
		return store.Reservation{}, fmt.Errorf("file: reserve: %w", err)
	}
	return res, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, _, keyHash string, now time.Time) (store.Record, error) {
	var r *store.Record
	err := s.withKey(ctx, keyHash, func() (err error) {
		r, err = s.read(keyHash)
		return err
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("file: get: %w", err)
	}
	if r == nil || r.Expired(now) {
		return store.Record{}, store.ErrNotFound
	}
	return *r, nil
}

// held runs fn on the in_progress record that f's token holds, under its
// stripe, or returns ErrLeaseLost.
func (s *Store) held(ctx context.Context, op string, f store.Fence, fn func(cur *store.Record) error) error {
	err := s.withKey(ctx, f.KeyHash, func() error {
		cur, err := s.read(f.KeyHash)
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
		return fn(cur)
	})
	if err != nil {
		return fmt.Errorf("file: %s: %w", op, err)
	}
	return nil
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, f store.Fence, leaseUntil time.Time) error {
	return s.held(ctx, "renew", f, func(cur *store.Record) error {
		r := *cur
		r.LeaseUntil = leaseUntil
		return s.write(&r, cur)
	})
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	return s.held(ctx, "complete", c.Fence, func(cur *store.Record) error {
		r := *cur
		r.State, r.Value, r.UpdatedAt, r.ExpiresAt = c.State, c.Value, c.Now, c.ExpiresAt
		return s.write(&r, cur)
	})
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.held(ctx, "release", f, func(cur *store.Record) error {
		b := s.db.NewBatch()
		defer b.Close()
		if err := remove(b, cur); err != nil {
			return err
		}
		return b.Commit(pebble.Sync)
	})
}

// cleanupChunk is how many index entries Cleanup handles per commit.
const cleanupChunk = 256

// Cleanup implements store.Store. It walks the expiry index from its start
// up to now, so it reads only entries that are due, never a live record's.
func (s *Store) Cleanup(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("file: cleanup: %w", err)
	}
	defer s.closeMu.RUnlock()
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	from := expPrefix
	// Exclusive bound: every entry whose time is not after now.
	upTo := appendTime(bytes.Clone(expPrefix), now.Add(time.Nanosecond))
	n := 0
	for limit <= 0 || n < limit {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("file: cleanup: %w", err)
		}
		chunk := cleanupChunk
		if limit > 0 {
			chunk = min(chunk, limit-n)
		}
		deleted, next, err := s.cleanup(from, upTo, chunk)
		n += deleted
		if err != nil {
			return n, fmt.Errorf("file: cleanup: %w", err)
		}
		if next == nil {
			break
		}
		// Start after what was just deleted, rather than skip its
		// tombstones again.
		from = next
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
	for _, k := range keys {
		at, keyHash, ok := parseExpKey(k)
		if !ok {
			return 0, nil, fmt.Errorf("%w: index key %q", ErrCorrupt, k)
		}
		if i := s.stripeIndex(keyHash); !held[i] {
			s.stripes[i].Lock()
			held[i] = true
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
			deleted++
		} else if err := b.Delete(k, nil); err != nil {
			// The record was rewritten or removed after the iterator
			// listed the entry, and that same batch deleted the entry:
			// deleting it again is a no-op kept for safety.
			return 0, nil, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, nil, err
	}
	if len(keys) < max {
		return deleted, nil, nil
	}
	return deleted, append(keys[len(keys)-1], 0), nil
}

// Close implements store.Store. It waits for the calls in progress, then
// closes the engine and releases the directory.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("file: close: %w", err)
	}
	return nil
}

// pebbleLogger sends Pebble's messages to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "store", "file")
}

// Fatalf is called on an engine invariant violation; like Pebble's default
// logger it does not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "store", "file")
	panic("file: " + msg)
}

// CountExpired counts the records expired at now by walking the expiry
// index, so it costs what a Cleanup would (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context, now time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("file: count expired: %w", err)
	}
	defer s.closeMu.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: expPrefix, UpperBound: appendTime(bytes.Clone(expPrefix), now.Add(time.Nanosecond))})
	if err != nil {
		return 0, fmt.Errorf("file: count expired: %w", err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n%4096 == 0 && ctx.Err() != nil {
			it.Close()
			return n, fmt.Errorf("file: count expired: %w", ctx.Err())
		}
		n++
	}
	return n, it.Close()
}
