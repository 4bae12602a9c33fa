package diskroom

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// TestAdmit: the gate admits while the room left, as read and less what
// was written since, is at least the headroom, and refuses below it with
// an error matching store.ErrNoSpace and ENOSPC; it reads the filesystem
// at most once per Every, and again after Forget.
func TestAdmit(t *testing.T) {
	var free, reads atomic.Int64
	free.Store(3 << 20)
	g := New(2<<20, func() (int64, error) { reads.Add(1); return free.Load(), nil })
	if err := g.Admit(); err != nil {
		t.Fatalf("3 MiB free, headroom 2 MiB: %v", err)
	}
	g.Wrote(1 << 20)
	if err := g.Admit(); err != nil {
		t.Fatalf("2 MiB left: %v", err)
	}
	g.Wrote(1)
	err := g.Admit()
	if !errors.Is(err, store.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a byte less than the headroom: %v, want store.ErrNoSpace and ENOSPC", err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads of the filesystem within one reading's life, want 1", n)
	}
	free.Store(10 << 20) // a file removed
	g.Forget()
	if err := g.Admit(); err != nil {
		t.Fatalf("after Forget with 10 MiB free: %v", err)
	}
	free.Store(0)
	time.Sleep(Every)
	if err := g.Admit(); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a reading later, with nothing free: %v", err)
	}
	if New(0, nil).Headroom() != DefaultHeadroom {
		t.Fatal("a zero headroom is not the default")
	}
}

// TestUnknownRoom: a filesystem that cannot tell its room admits.
func TestUnknownRoom(t *testing.T) {
	g := New(1, func() (int64, error) { return 0, syscall.ENOSYS })
	if err := g.Admit(); err != nil {
		t.Fatalf("unknown room: %v", err)
	}
}
