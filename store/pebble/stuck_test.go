package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// TestStuckEngineReplaced drives Pebble into the state in which a failed
// WAL write leaves its commit pipeline locked, and checks that the store
// replaces that engine without a restart. The disk is full as far as the
// engine sees (every write of its files fails with ENOSPC); three writes
// wait, having been taken by the store, while a fourth fails; then they
// go on: the first finds the WAL failed and fails, the next one's commit
// panics inside the pipeline with its lock held, and any after it would
// wait on that lock forever. Every one of them must fail at once, the
// store must serve replays and refuse new keys quickly while the disk is
// full, and write again once it has room, in the same process. The
// engine left behind keeps goroutines until the process exits, so the
// test runs in a child process.
func TestStuckEngineReplaced(t *testing.T) {
	t.Parallel()
	if !localtest.InChild(t) {
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	var full, parking atomic.Bool
	parked, release := make(chan struct{}, 3), make(chan struct{})
	s := openT(t, dir, func(o *Options) {
		o.fs = func(fs vfs.FS) vfs.FS { return fullFS{FS: fs, full: &full} }
		o.freeBytes = func() (int64, error) {
			if full.Load() {
				return 0, nil
			}
			return 1 << 30, nil
		}
		o.beforeCommit = func() {
			if parking.Load() {
				parked <- struct{}{}
				<-release
			}
		}
	})
	var done []string
	for i := range 20 {
		key := fmt.Sprint("k", i)
		if _, err := localtest.Record(ctx, s, key); err != nil {
			t.Fatal(err)
		}
		done = append(done, key)
	}

	// Three keys reserved, whose 64 KiB outcomes (each spans WAL blocks,
	// so that the first to go on marks the WAL failed for the next) wait
	// to be written.
	big := bytes.Repeat([]byte("x"), 64<<10)
	errs := make(chan error, 3)
	var waiting []store.ReserveRequest
	for _, key := range []string{"b", "c", "d"} {
		req := localtest.FullRequest(key)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, req)
	}
	parking.Store(true)
	for _, req := range waiting {
		go func() {
			errs <- s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: big, TTL: time.Hour})
		}()
	}
	for range waiting {
		<-parked
	}
	parking.Store(false)

	full.Store(true)
	if _, err := s.Reserve(ctx, localtest.FullRequest("a")); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a reservation on the full disk: %v, want an error matching store.ErrNoSpace", err)
	}
	close(release)
	for range waiting {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("an outcome was written after the WAL failed")
			}
		case <-time.After(closeWait / 2):
			t.Fatal("a write on the failed engine still waits; it should have failed once the engine was found stuck")
		}
	}
	localtest.Eventually(t, "the stuck engine is left behind", func() bool {
		s.closeMu.RLock()
		defer s.closeMu.RUnlock()
		return s.leftBehind == 1 && s.db != nil
	})

	// While the disk is full: replays, and quick refusals.
	localtest.CheckFull(t, ctx, s, done)

	// Room again: the store writes, in the same process.
	full.Store(false)
	localtest.Eventually(t, "the store is writable once the disk has room", func() bool { return s.Writable(ctx) == nil })
	back := localtest.RecordMore(t, ctx, s, 20)
	for _, req := range waiting {
		// Their outcomes failed; each stands reserved, or, had its
		// outcome reached the WAL first, replays it whole.
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.Token != req.Record.Token || !(r.State == store.InProgress || r.State == store.Succeeded && bytes.Equal(r.Value, big)) {
			t.Fatalf("key %s, whose outcome failed: %+v, %v", req.Record.Key, r, err)
		}
	}
	harness.Reopen(t, ctx, s, dir, append(done, back...))
}

// fullFS fails every write of the engine's files with ENOSPC while full
// is set, as a full disk does.
type fullFS struct {
	vfs.FS
	full *atomic.Bool
}

var errFull = &os.PathError{Op: "write", Path: "engine file", Err: syscall.ENOSPC}

func (fs fullFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return fullFile{File: f, full: fs.full}, nil
}

func (fs fullFS) Create(name string) (vfs.File, error) {
	if fs.full.Load() {
		return nil, errFull
	}
	return fs.wrap(fs.FS.Create(name))
}

func (fs fullFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	if fs.full.Load() {
		return nil, errFull
	}
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname))
}

func (fs fullFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, opts...))
}

type fullFile struct {
	vfs.File
	full *atomic.Bool
}

func (f fullFile) Write(p []byte) (int, error) {
	if f.full.Load() {
		return 0, errFull
	}
	return f.File.Write(p)
}

func (f fullFile) WriteAt(p []byte, off int64) (int, error) {
	if f.full.Load() {
		return 0, errFull
	}
	return f.File.WriteAt(p, off)
}

func (f fullFile) Preallocate(off, n int64) error {
	if f.full.Load() {
		return errFull
	}
	return f.File.Preallocate(off, n)
}

func (f fullFile) Sync() error {
	if f.full.Load() {
		return errFull
	}
	return f.File.Sync()
}

func (f fullFile) SyncData() error {
	if f.full.Load() {
		return errFull
	}
	return f.File.SyncData()
}

// TestFailedWriteNotRead: a completion whose WAL write failed is never
// read as recorded. Pebble makes a batch readable in its memtable before
// it knows the WAL write failed; read from the failed engine, the
// outcome would replay, and a retried Complete would find the key no
// longer in progress (the engine's keeper then takes it as written), yet
// after a restart it is gone. Reads wait for the engine reopened from
// its files instead, where the key is still reserved.
func TestFailedWriteNotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var full atomic.Bool
	hold := make(chan struct{})
	var holding atomic.Bool
	s := openT(t, t.TempDir(), func(o *Options) {
		o.fs = func(fs vfs.FS) vfs.FS { return fullFS{FS: fs, full: &full} }
		o.freeBytes = func() (int64, error) {
			if full.Load() {
				return 0, nil
			}
			return 1 << 30, nil
		}
		o.beforeReopen = func() {
			if holding.Load() {
				<-hold
			}
		}
	})
	var unhold sync.Once
	release := func() { unhold.Do(func() { holding.Store(false); close(hold) }) }
	t.Cleanup(release) // before the store's Close, which waits for the reopen
	done := localtest.RecordMore(t, ctx, s, 5)
	req := localtest.FullRequest("x")
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	holding.Store(true)
	full.Store(true)
	c := store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: localtest.Response("x"), TTL: time.Hour}
	if err := s.Complete(ctx, c); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Complete on the full disk: %v, want an error matching store.ErrNoSpace", err)
	}

	// The failed engine is still the store's: nothing may read it.
	gctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	r, err := s.Get(gctx, req.Record.Scope, req.Record.KeyHash)
	cancel()
	if err == nil && r.State != store.InProgress {
		t.Fatalf("Get of the key whose Complete failed, before the reopen: %s with %d bytes, an outcome that is not on disk", r.State, len(r.Value))
	}
	if err := s.Complete(ctx, c); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Complete retried before the reopen: %v, want an error matching store.ErrNoSpace (not a lost lease)", err)
	}

	release()
	r, err = s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
	if err != nil || r.State != store.InProgress || r.Token != req.Record.Token {
		t.Fatalf("Get of the key whose Complete failed, after the reopen: %+v, %v; want it in progress", r, err)
	}
	localtest.CheckReplays(t, ctx, s, done)
	full.Store(false)
	localtest.Eventually(t, "the store is writable once the disk has room", func() bool { return s.Writable(ctx) == nil })
	if err := s.Complete(ctx, c); err != nil {
		t.Fatalf("Complete with room again: %v", err)
	}
}
