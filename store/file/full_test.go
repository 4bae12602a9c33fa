package file

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/diskroom"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// The full-disk tests run the store on a tmpfs of 12 MiB (the size of the
// gateway's in the report of a store that a full disk broke for good) and
// fill it; localtest holds their helpers, and FullDiskKill.

// TestFullDisk fills a 12 MiB disk through the store. While it is full:
// a failed write fails its call with store.ErrNoSpace, new reservations
// are refused at once, every acknowledged response replays, Writable
// says why the store cannot write, and the store reopens. Once room comes
// back, it writes again without a restart, and everything replays after
// one.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	ctx := context.Background()
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast"), 2<<20)
	s := openT(t, dir)
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable on an empty store: %v", err)
	}

	done, reserved := harness.FillStore(t, ctx, s, "k")
	if len(done) < 100 {
		t.Fatalf("only %d responses recorded on a disk with about 10 MiB free", len(done))
	}
	localtest.CheckFull(t, ctx, s, done)
	if reserved != "" {
		// Its Complete failed: the reservation stands, without an outcome.
		req := localtest.FullRequest(reserved)
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.State != store.InProgress || r.Token != req.Record.Token {
			t.Fatalf("key %s, whose Complete failed: %+v, %v", reserved, r, err)
		}
	}
	checkIndex(t, s)

	// Reopened on the full disk, it serves what it holds.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	checkIndex(t, s)
	localtest.CheckReplays(t, ctx, s, done)
	if _, err := localtest.Record(ctx, s, "after-reopen"); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("recording after a reopen on the full disk: %v", err)
	}
	median, slowest := localtest.Refusals(t, ctx, s, "reopened", 20)
	t.Logf("after a reopen on the full disk, 20 new reservations were refused in %v (median), %v (slowest)", median, slowest)

	// Room comes back: the store writes again, by itself.
	if err := os.Remove(filepath.Join(disk, "ballast")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	var back []string
	localtest.Eventually(t, "a response is recorded once the disk has room", func() bool {
		key := fmt.Sprint("back", len(back), "-", time.Since(freed))
		_, err := localtest.Record(ctx, s, key)
		if err == nil {
			back = append(back, key)
		}
		return err == nil
	})
	t.Logf("with room again, the store recorded a response %v after it was freed", time.Since(freed))
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable once a write succeeded: %v", err)
	}
	back = append(back, localtest.RecordMore(t, ctx, s, 20)...)
	harness.Reopen(t, ctx, s, dir, append(done, back...))
}

// TestSmallWriteKeepsFull: on a disk still full for any response, a
// small frame that fits (a release) does not make the store writable
// again: new reservations stay refused and Writable says why, until the
// filesystem has 1 MiB free.
func TestSmallWriteKeepsFull(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	ctx := context.Background()
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast"), 2<<20)
	small := filepath.Join(disk, "small")
	tmpdisk.Ballast(t, small, 256<<10)
	s := openT(t, dir)
	held := localtest.Reserved(t, s, "held", time.Hour)
	harness.FillStore(t, ctx, s, "k")
	// FillStore may stop at the headroom (1 MiB) rather than at a full
	// disk: with small's 256 KiB freed, the filesystem would then have
	// the headroom free, and only a cached reading of it kept Writable
	// refusing until the cache expired (on a loaded machine, it did).
	tmpdisk.Leave(t, filepath.Join(disk, "rest"), 0)
	if err := os.Remove(small); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, localtest.FenceOf(held)); err != nil {
		t.Fatalf("a release with 256 KiB free: %v", err)
	}
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable after a small write with 256 KiB free: %v, want store.ErrNoSpace", err)
	}
	if _, err := s.Reserve(ctx, localtest.ReserveReq("new", time.Hour)); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a new reservation after a small write with 256 KiB free: %v, want store.ErrNoSpace", err)
	}
}

// TestFreshStoreLittleRoom: a new store on a disk with 1 MiB free, told
// its outcomes need at most 64 KiB (Options.Headroom), records responses.
// Zeros are written ahead of the log only when the disk has room to
// spare, so preallocation never takes the room that the frames need.
func TestFreshStoreLittleRoom(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 1<<20)
	if free := tmpdisk.Free(t, disk); free > 1<<20 {
		t.Fatalf("%d bytes free, want 1 MiB", free)
	}
	ctx := context.Background()
	s := openT(t, filepath.Join(disk, "store"), func(o *Options) { o.Headroom = 64 << 10 })
	var done []string
	for i := range 20 {
		key := fmt.Sprint("k", i)
		if _, err := localtest.Record(ctx, s, key); err != nil {
			t.Fatalf("response %d of 35 KiB with 1 MiB free: %v", i, err)
		}
		done = append(done, key)
	}
	s.log.fills.Wait()
	fi, err := os.Stat(s.log.active.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != s.log.active.size {
		t.Fatalf("the segment is %d bytes for %d of frames: written ahead on a disk with 1 MiB free", fi.Size(), s.log.active.size)
	}
	localtest.CheckReplays(t, ctx, s, done)
}

// TestFailedFillGivesRoomBack: a zero-fill that fails for want of room
// (another process took it after the fill checked) cuts off what its
// piece had taken, so the frames still have it.
func TestFailedFillGivesRoomBack(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 2<<20)
	ctx := context.Background()
	// Outcomes of 35 KiB: new keys are taken until the last 64 KiB.
	s := openT(t, filepath.Join(disk, "store"), func(o *Options) { o.Headroom = 64 << 10 })
	// The fill is told of plenty of room: its first piece of 1 MiB fits,
	// its second does not.
	s.log.freeBytes = func() (int64, error) { return math.MaxInt64, nil }
	if _, err := s.Reserve(ctx, localtest.FullRequest("first")); err != nil {
		t.Fatal(err)
	}
	s.log.fills.Wait()
	s.log.freeBytes = func() (int64, error) { return diskroom.FreeBytes(disk) }
	if free := tmpdisk.Free(t, disk); free < 768<<10 {
		t.Fatalf("after a failed zero-fill, %d bytes free, want the second piece's room back (about 1 MiB)", free)
	}
	done, _ := harness.FillStore(t, ctx, s, "k")
	if len(done) < 40 {
		t.Fatalf("%d responses of 35 KiB recorded in 2 MiB after a failed fill", len(done))
	}
}

// TestFailedWriteCut: a sync that fails part way (its first frame
// written whole, its second cut short by a full disk) is cut off the
// file, so that neither this process nor a reopen reads any of it, and
// the next write lands where it began.
func TestFailedWriteCut(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	ctx := context.Background()
	s := openT(t, dir)
	if _, err := localtest.Record(ctx, s, "before"); err != nil {
		t.Fatal(err)
	}
	s.log.fills.Wait()
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 100<<10)
	// Two frames in one sync: a reservation of x, which fits, then a
	// record of y with 200 KiB, which does not.
	frame := func(key string, value []byte) []byte {
		r := localtest.FullRequest(key).Record
		r.Value = value
		b, _ := appendFrame(nil, kindPut, s.seq.Add(1), mustID(t, r.KeyHash), &r, time.Minute)
		return b
	}
	start := s.log.active.size
	s.log.append(frame("x", nil))
	_, _, b := s.log.append(frame("y", make([]byte, 200<<10)))
	if err := s.log.wait(b); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a sync of 200 KiB with 100 KiB free: %v", err)
	}
	fi, err := os.Stat(s.log.active.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != start || s.log.active.size != start {
		t.Fatalf("after the failed sync the segment is %d bytes (the log counts %d), want %d: not cut back", fi.Size(), s.log.active.size, start)
	}
	s.Close()
	s = openT(t, dir)
	for _, key := range []string{"x", "y"} {
		req := localtest.FullRequest(key)
		if r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("key %s of the failed sync reads %+v, %v after a reopen", key, r, err)
		}
	}
	localtest.CheckReplays(t, ctx, s, []string{"before"})
	if err := os.Remove(filepath.Join(disk, "ballast")); err != nil {
		t.Fatal(err)
	}
	if _, err := localtest.Record(ctx, s, "after"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	checkIndex(t, s)
	localtest.CheckReplays(t, ctx, s, []string{"before", "after"})
}

// TestAdmitByRoom: localtest.AdmitByRoom on a 12 MiB tmpfs whose free
// room a ballast takes; a refused reservation writes nothing.
func TestAdmitByRoom(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	s := openT(t, filepath.Join(disk, "store"), func(o *Options) { o.Headroom = 2 << 20 })
	ballast := filepath.Join(disk, "ballast")
	var syncs uint64
	localtest.AdmitByRoom(t, s, func() {
		// 1.5 MiB: room for an outcome of 35 KiB, not for the headroom.
		tmpdisk.Leave(t, ballast, 3<<19)
		s.log.gate.Forget()
		syncs = s.log.syncs.Load()
	}, func() {
		if n := s.log.syncs.Load() - syncs; n != 0 {
			t.Fatalf("refused reservations wrote %d syncs", n)
		}
	}, func() {
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
	})
}
