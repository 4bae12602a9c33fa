package pebblestore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

// TestOneSyncSyncsOnce: with OneSync a first call (reserve, then
// complete) syncs the WAL once, and a reservation that may not be taken
// over (on_stale: conflict) still syncs before Reserve returns; a key
// reserved and not yet synced is seen at once by every other caller, and
// its record is there after Close and a reopen.
func TestOneSyncSyncsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	var syncs atomic.Int64
	opts := func(o *Options) {
		o.OneSync, o.HoldFor = true, time.Hour
		o.fs = func(fs vfs.FS) vfs.FS { return countFS{FS: fs, syncs: &syncs} }
	}
	s := openT(t, dir, opts)
	localtest.Complete(t, s, localtest.Reserved(t, s, "warm", time.Hour), "v", time.Hour)
	pairSyncs := func(key string, takeOver bool) (reserve, pair int64) {
		req := localtest.ReserveReq(key, time.Hour)
		req.TakeOverStale = takeOver
		before := syncs.Load()
		if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
			t.Fatalf("reserve %s: %+v, %v", key, res, err)
		}
		reserve = syncs.Load() - before
		localtest.Complete(t, s, req, "v-"+key, time.Hour)
		return reserve, syncs.Load() - before
	}
	if r, p := pairSyncs("retry", true); r != 0 || p != 1 {
		t.Fatalf("on_stale: retry: %d WAL syncs in Reserve, %d for the pair; want 0 and 1", r, p)
	}
	if r, p := pairSyncs("conflict", false); r != 1 || p != 2 {
		t.Fatalf("on_stale: conflict: %d WAL syncs in Reserve, %d for the pair; want 1 and 2", r, p)
	}
	held := localtest.ReserveReq("held", time.Hour)
	if _, err := s.Reserve(ctx, held); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(ctx, localtest.ReserveReq("held", time.Hour))
	if err != nil || res.Acquired || res.Existing.Token != held.Record.Token || res.Existing.State != store.InProgress {
		t.Fatalf("a second caller of a key reserved and not synced: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, opts)
	r, err := s.Get(ctx, held.Record.Scope, held.Record.KeyHash)
	if err != nil || r.State != store.InProgress || r.Token != held.Record.Token {
		t.Fatalf("key reserved before Close, after a reopen: %+v, %v", r, err)
	}
}

// countFS counts the syncs of the engine's WAL files.
type countFS struct {
	vfs.FS
	syncs *atomic.Int64
}

func (fs countFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return countFile{File: f, syncs: fs.syncs}, nil
}

func (fs countFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.wrap(name, f, err)
}

func (fs countFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	return fs.wrap(newname, f, err)
}

type countFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f countFile) Sync() error     { f.syncs.Add(1); return f.File.Sync() }
func (f countFile) SyncData() error { f.syncs.Add(1); return f.File.SyncData() }

// TestConformanceOneSync runs the suite on a store whose reservations
// that may be taken over are kept in memory until their completion (see
// pending): every caller in the process sees them at once.
func TestConformanceOneSync(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return openT(t, t.TempDir(), func(o *Options) { o.OneSync, o.HoldFor = true, time.Hour })
		},
		IndexKeys: func(t *testing.T, s store.Store) []string {
			return append(allKeys(t, s.(*Store)), pendingKeys(s.(*Store))...)
		},
	})
}

// pendingKeys lists the key hashes of the pending reservations.
func pendingKeys(s *Store) []string {
	var keys []string
	for i := range s.pending {
		s.stripes[i].Lock()
		for k := range s.pending[i] {
			keys = append(keys, k)
		}
		s.stripes[i].Unlock()
	}
	return keys
}

// TestOneSyncPending: under OneSync a reservation that may be taken over
// is written by its completion, in one batch, or by a renewal, and not
// before; until then Get, Renew, Release and Cleanup see it where it is
// kept. One that took
// over a record the engine holds replaces it at its completion, leaves
// no trace of it on a release, and Cleanup deleting the expired record it
// replaced neither counts it nor leaves the index wrong.
func TestOneSyncPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s := openT(t, t.TempDir(), func(o *Options) { o.OneSync, o.HoldFor = true, time.Hour; o.now = now })
	onDisk := func(req store.ReserveRequest) *store.Record { return checkIndex(t, s)[req.Record.KeyHash] }

	a := localtest.Reserved(t, s, "a", time.Hour)
	if onDisk(a) != nil {
		t.Fatal("a reservation under OneSync was written before its completion")
	}
	if r, err := s.Get(ctx, "s", a.Record.KeyHash); err != nil || r.State != store.InProgress || r.Token != a.Record.Token {
		t.Fatalf("Get of a pending reservation: %+v, %v", r, err)
	}
	if err := s.Renew(ctx, localtest.FenceOf(a), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(ctx, "s", a.Record.KeyHash); r.LeaseLeft != 2*time.Minute {
		t.Fatalf("renewed pending reservation: lease left %v, want 2m", r.LeaseLeft)
	}
	if r := onDisk(a); r == nil || r.State != store.InProgress || s.npending.Load() != 0 {
		t.Fatalf("a renewed reservation is durable: on disk %+v, %d pending", r, s.npending.Load())
	}
	localtest.Complete(t, s, a, "v", time.Hour)
	if r := onDisk(a); r == nil || r.State != store.Succeeded {
		t.Fatalf("completed pending reservation on disk: %+v", r)
	}

	// Taken over once expired; Cleanup deletes the record it replaced.
	b := localtest.Reserved(t, s, "b", time.Minute)
	localtest.Complete(t, s, b, "old", time.Minute)
	advance(2 * time.Minute)
	b2 := localtest.Reserved(t, s, "b", time.Hour)
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Cleanup with only a replaced record expired: %d, %v; want 0", n, err)
	}
	localtest.Complete(t, s, b2, "new", time.Hour)
	if r := onDisk(b2); r == nil || string(r.Value) != "new" {
		t.Fatalf("b after its second completion: %+v", r)
	}

	// Taken over once stale, then released: the key is free.
	c := localtest.Leased("c", time.Second, time.Hour)
	c.TakeOverStale = false // synced, on disk
	if _, err := s.Reserve(ctx, c); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Second)
	c2 := localtest.ReserveReq("c", time.Hour)
	if res, err := s.Reserve(ctx, c2); err != nil || !res.Acquired || !res.TookOver {
		t.Fatalf("take-over of a stale record: %+v, %v", res, err)
	}
	if err := s.Release(ctx, localtest.FenceOf(c2)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "s", c.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a released take-over: %+v, %v; want ErrNotFound", r, err)
	}

	// A pending reservation whose lifetime ended is swept and counted.
	localtest.Reserved(t, s, "d", time.Minute)
	advance(2 * time.Minute)
	if n, err := s.CountExpired(ctx); err != nil || n != 1 {
		t.Fatalf("CountExpired with a pending reservation expired: %d, %v; want 1", n, err)
	}
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 1 || s.npending.Load() != 0 {
		t.Fatalf("Cleanup of an expired pending reservation: %d, %v, %d left; want 1, 0 left", n, err, s.npending.Load())
	}
}
