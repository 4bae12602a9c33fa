package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// The full-disk tests run the store on a tmpfs of 12 MiB (the size of the
// gateway's in the report of a store that a full disk broke for good:
// Pebble panicked through its logger's Fatalf on its WAL's failed write,
// and could not open again while the disk was full) and fill it.

// TestFullDisk fills a 12 MiB disk through the store. The commit that
// fails (Pebble's Fatalf, which no longer exits) fails its call with
// store.ErrNoSpace, and the store reopens its engine read-only: new
// reservations are refused at once, every acknowledged response replays,
// Writable says why the store cannot write, and the store reopens on the
// full disk, even with some room but less than a read-write open needs
// (whose partial tables it then removes). Once the disk has room for the
// tables of its WAL, it reopens the engine read-write by itself, and
// writes again.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	ctx := context.Background()
	// 8 MiB of ballast: freed, it leaves room for the WAL's 4 MiB as
	// tables (docs/stores/PEBBLE.md, "A full disk"). 2 MiB of it are freed
	// first.
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast-2m"), 2<<20)
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast-6m"), 6<<20)
	s := openT(t, dir, fillUp)
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable on an empty store: %v", err)
	}

	done, reserved := harness.FillStore(t, ctx, s, "k")
	if len(done) < 50 {
		t.Fatalf("only %d responses recorded on a disk with about 4 MiB free", len(done))
	}
	localtest.CheckFull(t, ctx, s, done)
	if reserved != "" {
		// Its Complete failed: the reservation stands, its outcome may or
		// may not have reached the WAL before the disk filled.
		req := localtest.FullRequest(reserved)
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.Token != req.Record.Token || r.State == store.Failed ||
			r.State == store.Succeeded && !bytes.Equal(r.Value, localtest.Response(reserved)) {
			t.Fatalf("key %s, whose Complete failed: %+v, %v", reserved, r, err)
		}
		t.Logf("the key whose Complete failed reads %s", r.State)
	}
	checkIndex(t, s)

	// Reopened on the full disk, it serves what it holds.
	if err := s.Close(); err != nil {
		t.Logf("Close after a failed write: %v", err)
	}
	s = openT(t, dir, fillUp)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable after a reopen on the full disk: %v, want an error matching store.ErrNoSpace", err)
	}
	checkIndex(t, s)
	localtest.CheckReplays(t, ctx, s, done)
	median, slowest := localtest.Refusals(t, ctx, s, "reopened", 20)
	t.Logf("after a reopen on the full disk, 20 new reservations were refused in %v (median), %v (slowest)", median, slowest)
	s.Close()

	// With 2 MiB free, Open tries read-write, fails when its tables fill
	// the disk, removes them, and opens read-only.
	if err := os.Remove(filepath.Join(disk, "ballast-2m")); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, fillUp)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable after a reopen with 2 MiB free: %v, want an error matching store.ErrNoSpace", err)
	}
	if free := tmpdisk.Free(t, disk); free < 3<<19 {
		t.Fatalf("%d bytes free after an open that could not write its tables: it left them behind", free)
	}
	localtest.CheckReplays(t, ctx, s, done)

	// Room comes back: the store writes again, by itself.
	if err := os.Remove(filepath.Join(disk, "ballast-6m")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	localtest.Eventually(t, "the store is writable once the disk has room", func() bool { return s.Writable(ctx) == nil })
	t.Logf("with room again, the store was writable %v after it was freed", time.Since(freed))
	var back []string
	back = append(back, localtest.RecordMore(t, ctx, s, 20)...)
	reopened := harness.Reopen(t, ctx, s, dir, append(done, back...))
	if err := reopened.Writable(ctx); err != nil {
		t.Fatalf("Writable after a reopen with room: %v", err)
	}
}

// fillUp opens a store that admits new keys until its disk is full (a
// headroom of one byte), so that a write fails for want of room, as
// outcomes of keys under way can, and the store's recovery from it is
// what a test sees.
func fillUp(o *Options) { o.Headroom = 1 }

// TestFreshStoreLittleRoom: a new store on a disk with 1 MiB free, told
// its outcomes need at most 64 KiB (Options.Headroom), records small
// responses.
func TestFreshStoreLittleRoom(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 1<<20)
	ctx := context.Background()
	s := openT(t, filepath.Join(disk, "store"), func(o *Options) { o.Headroom = 64 << 10 })
	for i := range 50 {
		req := localtest.FullRequest(fmt.Sprint("k", i))
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatalf("reservation %d with 1 MiB free: %v", i, err)
		}
		if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: localtest.Response(req.Record.Key)[:2<<10], TTL: time.Hour}); err != nil {
			t.Fatalf("response %d of 2 KiB with 1 MiB free: %v", i, err)
		}
	}
	n := 0
	for ; ; n++ {
		if _, err := localtest.Record(ctx, s, fmt.Sprint("big", n)); err != nil {
			break
		}
	}
	t.Logf("a new store on a disk with 1 MiB free recorded 50 responses of 2 KiB, then %d of 35 KiB", n)
}

// TestFatalf: Pebble's Fatalf panics in a call of the store's own, which
// turns it into that call's error, and elsewhere (Pebble's background
// jobs) tells the store and returns.
func TestFatalf(t *testing.T) {
	t.Parallel()
	var told error
	l := pebbleLogger{l: quiet.Logger, fatal: func(err error) { told = err }}
	err := guard(func() error {
		l.Fatalf("pebble: fatal commit error: %v", syscall.ENOSPC)
		t.Error("Fatalf returned inside guard")
		return nil
	})
	if !noSpace(err) || told != nil {
		t.Fatalf("inside guard: %v (told %v); want the Fatalf as an error, for want of space", err, told)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Fatalf("MANIFEST sync failed: %v", syscall.EIO)
	}()
	<-done
	if told == nil || !strings.Contains(told.Error(), "MANIFEST sync failed") {
		t.Fatalf("outside guard the store was told %v", told)
	}
}

// TestAdmitByRoom: localtest.AdmitByRoom, the free room as the store's
// filesystem reports it set by the test.
func TestAdmitByRoom(t *testing.T) {
	t.Parallel()
	var free atomic.Int64
	free.Store(1 << 30)
	s := openT(t, t.TempDir(), func(o *Options) {
		o.Headroom = 2 << 20
		o.freeBytes = func() (int64, error) { return free.Load(), nil }
	})
	localtest.AdmitByRoom(t, s, func() {
		free.Store(3 << 19) // room for an outcome of 35 KiB, not for the headroom
		s.gate.Forget()
	}, func() {}, func() { free.Store(1 << 30) })
}
