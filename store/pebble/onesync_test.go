package pebblestore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
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
		o.OneSync = true
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
