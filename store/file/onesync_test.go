package file

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

// oneSync opens a store with Options.OneSync, whose reservations kept in
// memory stay so for an hour: the tests that count frames or look at
// what is kept must not race the sweep (sweepHeld) on a loaded machine.
func oneSync(o *Options) { o.OneSync, o.HoldFor = true, time.Hour }

// TestConformanceOneSync runs the suite on a store whose reservations
// return before their sync, with segments a few records long (rotation,
// dropping and compaction inside it): every caller in the process sees a
// reservation at once, whatever the disk has.
func TestConformanceOneSync(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			// A bound of 1 ms: the sweep writes most reservations that
			// wait for anything, while their holders and readers use them.
			return openT(t, t.TempDir(), oneSync, func(o *Options) { o.SegmentBytes, o.HoldFor = 2<<10, time.Millisecond })
		},
		IndexKeys: func(t *testing.T, s store.Store) []string { return indexKeys(s.(*Store)) },
		Swept:     func(s store.Store) int { return int(s.(*Store).swept.Load()) },
	})
}

// TestSnapshotCrashOneSync is TestSnapshotCrash on a store opened with
// OneSync: after each SIGKILL every completed key has its outcome and
// every released key is gone; a reservation that could be taken over
// (on_stale: retry) may be gone if nothing synced it before the kill,
// one that could not (on_stale: conflict) is there; no key holds
// another token; and the snapshot agrees with the whole log. IDEM_LONG=1
// (make crash) kills it 80 times.
func TestSnapshotCrashOneSync(t *testing.T) {
	t.Parallel()
	snapCrash(t, "onesync")
}

// TestOneSyncSyncsOnce: with OneSync a first call (reserve, then
// complete) costs one fdatasync, and a reservation that may not be
// taken over (on_stale: conflict) still syncs before Reserve returns;
// a key reserved and not yet synced is seen at once by every other
// caller, and its record is on disk once Close returns.
func TestOneSyncSyncsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openT(t, dir, oneSync)
	localtest.Complete(t, s, localtest.Reserved(t, s, "warm", time.Hour), "v", time.Hour) // the segment's file exists
	pairSyncs := func(key string, takeOver bool) (reserve, pair uint64) {
		req := localtest.ReserveReq(key, time.Hour)
		req.TakeOverStale = takeOver
		before := s.log.syncs.Load()
		if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
			t.Fatalf("reserve %s: %+v, %v", key, res, err)
		}
		reserve = s.log.syncs.Load() - before
		localtest.Complete(t, s, req, "v-"+key, time.Hour)
		return reserve, s.log.syncs.Load() - before
	}
	if r, p := pairSyncs("retry", true); r != 0 || p != 1 {
		t.Fatalf("on_stale: retry: %d fdatasyncs in Reserve, %d for the pair; want 0 and 1", r, p)
	}
	if r, p := pairSyncs("conflict", false); r != 1 || p != 2 {
		t.Fatalf("on_stale: conflict: %d fdatasyncs in Reserve, %d for the pair; want 1 and 2", r, p)
	}

	// Reserved, not synced: another caller finds it in progress.
	held := localtest.ReserveReq("held", time.Hour)
	before := s.log.syncs.Load()
	if _, err := s.Reserve(ctx, held); err != nil {
		t.Fatal(err)
	}
	other := localtest.ReserveReq("held", time.Hour)
	res, err := s.Reserve(ctx, other)
	if err != nil || res.Acquired || res.Existing.Token != held.Record.Token || res.Existing.State != store.InProgress {
		t.Fatalf("a second caller of a key reserved and not synced: %+v, %v", res, err)
	}
	if s.log.syncs.Load() == before {
		t.Fatal("the second caller read a reservation no sync had covered")
	}
	unsynced := localtest.ReserveReq("unsynced", time.Hour)
	if _, err := s.Reserve(ctx, unsynced); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, oneSync)
	for _, req := range []store.ReserveRequest{held, unsynced} {
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.State != store.InProgress || r.Token != req.Record.Token {
			t.Fatalf("key %s reserved before Close, after a reopen: %+v, %v", req.Record.Key, r, err)
		}
	}
}

// TestOneSyncFailedSyncUndone: a reservation that returned before its
// sync, whose sync then fails (here together with its holder's Complete,
// in one write too large for the disk), is undone: the key reads absent,
// as the disk has it, is free to reserve again, and nothing reads the
// frame that was cut off.
func TestOneSyncFailedSyncUndone(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	ctx := context.Background()
	// 2 MiB free before the store writes: no zeros are written ahead of
	// its frames, so a frame needs room on the disk itself.
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 2<<20)
	dir := filepath.Join(disk, "store")
	s := openT(t, dir, oneSync, func(o *Options) { o.Headroom = 1 })
	done := localtest.RecordMore(t, ctx, s, 3)
	tmpdisk.Leave(t, filepath.Join(disk, "ballast2"), 16<<10)
	s.log.gate.Forget()
	req := localtest.FullRequest("undone")
	if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("a reservation with 16 KiB free: %+v, %v", res, err)
	}
	err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: localtest.Response("undone"), TTL: time.Hour})
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a Complete of 35 KiB with 16 KiB free: %v, want store.ErrNoSpace", err)
	}
	if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the key whose reservation's sync failed: %v, want store.ErrNotFound", err)
	}
	checkIndex(t, s)
	localtest.CheckReplays(t, ctx, s, done)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, oneSync, func(o *Options) { o.Headroom = 1 })
	if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a reopen, the key whose reservation's sync failed: %v, want store.ErrNotFound", err)
	}
	localtest.CheckReplays(t, ctx, s, done)
}

// TestOneSyncFailedSyncKeepsSegment: a reservation that took over a stale
// one and returned before its sync leaves the segment of the stale frame
// with no live bytes; a reclaim then must not drop that segment before
// the sync ends, for if the sync fails, the stale reservation is the
// key's state again, read from that segment, now and after a reopen.
func TestOneSyncFailedSyncKeepsSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	opts := func(o *Options) { o.OneSync = true; o.SegmentBytes = 512; o.cleanupOnly = true; o.now = now }
	s := openT(t, dir, opts)
	stale := localtest.Leased("stale", time.Minute, time.Hour)
	stale.TakeOverStale = false // synced before Reserve returns
	if res, err := s.Reserve(ctx, stale); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	id := mustID(t, stale.Record.KeyHash)
	_, e := lookup(&s.stripes[stripeOf(id)], &id)
	for i := 0; e.seg == uint32(s.log.activeID()); i++ {
		// Filler released: the stale frame is its segment's only live one.
		req := localtest.ReserveReq(fmt.Sprint("filler", i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, localtest.FenceOf(req)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(int64(2 * time.Minute))
	next := localtest.Leased("stale", time.Minute, time.Hour)
	if res, err := s.Reserve(ctx, next); err != nil || !res.Acquired {
		t.Fatalf("a take-over of the stale reservation: %+v, %v", res, err)
	}
	// Its sync will fail.
	failed := errors.New("injected: the sync fails")
	s.log.broken.Store(&failed)
	if _, err := s.Cleanup(ctx, 0); err != nil {
		t.Fatal(err)
	}
	staleStands(t, s, dir, opts, stale)
}

// TestOneSyncWritesOneFrame: with OneSync a first call of a new key
// (reserve under on_stale: retry, then complete) appends one frame, its
// outcome, and leaves no dead bytes in the log; a reservation its holder
// never wrote to and that expired is swept like any other, and its
// holder's Complete then finds its lease lost.
func TestOneSyncWritesOneFrame(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	s := openT(t, t.TempDir(), oneSync, func(o *Options) { o.now = func() time.Time { return time.Unix(0, clock.Load()) } })
	appended := func() int64 {
		s.log.mu.Lock()
		defer s.log.mu.Unlock()
		return s.log.active.size
	}
	req := localtest.ReserveReq("first", time.Hour)
	before := appended()
	if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	if n := appended() - before; n != 0 {
		t.Fatalf("a reservation of a new key under on_stale: retry appended %d bytes, want none", n)
	}
	localtest.Complete(t, s, req, "v", time.Hour)
	id := mustID(t, req.Record.KeyHash)
	_, e := lookup(&s.stripes[stripeOf(id)], &id)
	if n := appended() - before; n != int64(e.size) {
		t.Fatalf("the pair appended %d bytes, want its outcome's frame alone (%d)", n, e.size)
	}
	if live := s.log.segment(uint32(s.log.activeID())).live.Load(); live != appended()-int64(len(segmentMagic)) {
		t.Fatalf("the segment holds %d bytes of frames, %d of them live: a dead frame was written", appended()-int64(len(segmentMagic)), live)
	}

	lapsed := localtest.Leased("lapsed", time.Minute, time.Minute)
	if res, err := s.Reserve(ctx, lapsed); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	clock.Add(int64(2 * time.Minute))
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 1 {
		t.Fatalf("Cleanup of the expired reservation: %d, %v; want 1", n, err)
	}
	err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(lapsed), State: store.Succeeded, Value: []byte("late"), TTL: time.Hour})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the Complete of a reservation swept: %v, want store.ErrLeaseLost", err)
	}
	if _, err := s.Get(ctx, lapsed.Record.Scope, lapsed.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the key swept: %v, want store.ErrNotFound", err)
	}
	for i := range s.stripes {
		if n := len(s.stripes[i].pend); n != 0 {
			t.Fatalf("stripe %d keeps %d reservations after their keys ended", i, n)
		}
	}
	checkIndex(t, s)
}

// TestOneSyncUnwrittenStaysHeld: another caller's read of a key whose
// reservation is kept in memory writes it first; when that write fails
// (here: the log refuses every write), the read fails with it, and the
// reservation stays its holder's: the key is not freed for another
// caller to run, and the holder completes it once the log writes again.
func TestOneSyncUnwrittenStaysHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openT(t, t.TempDir(), oneSync)
	held := localtest.ReserveReq("held", time.Hour)
	if res, err := s.Reserve(ctx, held); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	failed := errors.New("injected: the log refuses writes")
	s.log.broken.Store(&failed)
	if _, err := s.Get(ctx, held.Record.Scope, held.Record.KeyHash); !errors.Is(err, failed) {
		t.Fatalf("a Get whose write of the reservation failed: %v, want the injected error", err)
	}
	other := localtest.ReserveReq("held", time.Hour)
	if res, err := s.Reserve(ctx, other); !errors.Is(err, failed) || res.Acquired {
		t.Fatalf("another caller's Reserve while the reservation cannot be written: %+v, %v; want the injected error", res, err)
	}
	s.log.broken.Store(nil)
	s.log.unwritable.Store(nil)
	r, err := s.Get(ctx, held.Record.Scope, held.Record.KeyHash)
	if err != nil || r.State != store.InProgress || r.Token != held.Record.Token {
		t.Fatalf("the key once the log writes again: %+v, %v; want the holder's reservation", r, err)
	}
	localtest.Complete(t, s, held, "v", time.Hour)
	checkIndex(t, s)
}

// staleStands fails t unless the key of stale, whose take-over's sync
// failed, still reads stale's reservation, at once and after s is closed
// and the store opened again from dir.
func staleStands(t *testing.T, s *Store, dir string, opts func(*Options), stale store.ReserveRequest) {
	t.Helper()
	check := func(s *Store, when string) {
		r, err := s.Get(context.Background(), stale.Record.Scope, stale.Record.KeyHash)
		if err != nil || r.State != store.InProgress || r.Token != stale.Record.Token {
			t.Fatalf("%s, the key whose take-over's sync failed: %+v, %v; want the stale reservation (token %d)", when, r, err, stale.Record.Token)
		}
	}
	check(s, "at once")
	s.Close()
	check(openT(t, dir, opts), "after a reopen")
}
