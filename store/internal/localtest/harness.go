package localtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
	"github.com/idem-dev/idem/store/storetest/history"
)

// Harness is one embedded store, as the shared tests open and inspect it.
type Harness struct {
	// Open opens the store on dir with the tests' options (a quiet
	// logger) and wall as its wall clock; nil means the system's.
	Open func(dir string, wall func() time.Time) (store.Store, error)
	// OpenOneSync is Open with the store's OneSync option: a reservation
	// that may be taken over returns before its sync.
	OpenOneSync func(dir string, wall func() time.Time) (store.Store, error)
	// ErrLocked is what Open returns for a directory another Store holds.
	ErrLocked error
	// IndexKeys lists the keys of the store's own index (see
	// storetest.Harness).
	IndexKeys func(t *testing.T, s store.Store) []string
	// Records checks the store's own expiry index against its records and
	// returns the records by key hash.
	Records func(t testing.TB, s store.Store) map[string]*store.Record
	// Scanned points at the count of expiry entries the store's Cleanup
	// has read.
	Scanned func(s store.Store) *int
	// CountExpired is the store's count of records whose lifetime is over.
	CountExpired func(ctx context.Context, s store.Store) (int, error)
	// Syncs counts the store's syncs to disk so far. A count may lag by
	// SyncLag; concurrent writes share a sync by GroupShare or more, after
	// up to GroupAttempts attempts (see GroupCommit).
	Syncs         func(t *testing.T, s store.Store) uint64
	SyncLag       uint64
	GroupShare    uint64
	GroupAttempts int
	// Format1 is the directory, under testdata, of a store written in
	// record format 1, before the store kept its own clock (see
	// ReadsFormat1).
	Format1 string
	// ENOSPC: a write refused for want of space also matches
	// syscall.ENOSPC.
	ENOSPC bool
	// FailedCallMayLand: a Reserve or Complete that failed for want of
	// space may have reached the disk whole (its group's write failing
	// after it), so that a reopen finds its record.
	FailedCallMayLand bool
}

// OpenT opens the store on dir with the system's wall clock, closed when
// t ends.
func (h Harness) OpenT(t testing.TB, dir string) store.Store {
	return h.OpenWall(t, dir, nil)
}

// OpenWall is OpenT with wall as the store's wall clock.
func (h Harness) OpenWall(t testing.TB, dir string, wall func() time.Time) store.Store {
	t.Helper()
	s, err := h.Open(dir, wall)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (h Harness) open(dir string) (store.Store, error) { return h.Open(dir, nil) }

// The environment of a child process: which child, on which directory,
// in which round of its test.
const (
	childEnv = "IDEM_FILE_TEST_CHILD"
	dirEnv   = "IDEM_FILE_TEST_DIR"
	roundEnv = "IDEM_FILE_TEST_ROUND"
)

// Main is a store's TestMain: it runs m, checking that Close stopped every
// goroutine, or, in a child process one of the tests started, that
// child's part. own are the children of the store's own tests, by name
// (see ChildCommand).
func Main(m *testing.M, h Harness, own map[string]func(dir, round string) int) {
	storetest.CrashChild(h.open)
	name := os.Getenv(childEnv)
	if name == "" {
		testkit.VerifyTestMain(m)
		return
	}
	if name == testChild {
		os.Exit(m.Run())
	}
	dir, round := os.Getenv(dirEnv), os.Getenv(roundEnv)
	switch name {
	case "hold":
		os.Exit(holdChild(h, dir))
	case "reserve":
		os.Exit(reserveChild(h, dir))
	case "held":
		os.Exit(heldChild(h, dir))
	case "fill":
		os.Exit(fullChild(h, dir, round))
	}
	if child := own[name]; child != nil {
		os.Exit(child(dir, round))
	}
	fmt.Fprintf(os.Stderr, "unknown %s\n", childEnv)
	os.Exit(2)
}

// testChild is the child that runs one test (see InChild).
const testChild = "test"

// InChild runs the calling test again in a child process, whose
// goroutines are not checked when it ends, and reports whether the caller
// is that child: a test that leaves goroutines behind by design (an engine
// the store gave up on) runs its body only then.
//
//	if !localtest.InChild(t) {
//		return
//	}
func InChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == testChild {
		return true
	}
	cmd := ChildCommand(testChild, "", 0)
	cmd.Args = append(cmd.Args, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
	out, err := cmd.CombinedOutput()
	t.Logf("the test in a child process:\n%s", out)
	if err != nil {
		t.Fatalf("the test failed in its child process: %v", err)
	}
	return false
}

// ChildCommand runs the test binary as the child name (one of Main's) on
// dir, in round.
func ChildCommand(name, dir string, round int) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+name, dirEnv+"="+dir, fmt.Sprint(roundEnv+"=", round))
	return cmd
}

// Run runs the shared tests on the store, each in parallel with the
// others: Conformance, Locked, WallClockJump, RestartClockJump, ReadsFormat1,
// IndexConsistent, GroupCommit, CountExpired, CleanupReadsOnlyDue, Crash,
// HistoryCrash, HistoryCrashOneSync, HeldKill and FullDiskKill.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, h Harness)
	}{
		{"Conformance", Conformance},
		{"Locked", Locked},
		{"WallClockJump", WallClockJump},
		{"RestartClockJump", RestartClockJump},
		{"ReadsFormat1", ReadsFormat1},
		{"IndexConsistent", IndexConsistent},
		{"GroupCommit", GroupCommit},
		{"CountExpired", CountExpired},
		{"CleanupReadsOnlyDue", CleanupReadsOnlyDue},
		{"Crash", Crash},
		{"HistoryCrash", HistoryCrash},
		{"HistoryCrashOneSync", HistoryCrashOneSync},
		{"HeldKill", HeldKill},
		{"FullDiskKill", FullDiskKill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, h)
		})
	}
}

// HistoryCrash: the store's histories stay linearizable across kill -9
// and restart; calls cut by the kill took effect entirely or not at all,
// and a call that returned is there after the restart (history.RunCrash).
func HistoryCrash(t *testing.T, h Harness) { history.RunCrash(t, h.open) }

// HistoryCrashOneSync is HistoryCrash on the store opened with OneSync,
// the gateway's setting: the child is killed at random points, between
// reservations and their completions among them; a reservation that may
// be taken over may be lost with its holder unless a later write of its
// key synced it, and nothing else that returned may be
// (history.RunCrashOneSync).
func HistoryCrashOneSync(t *testing.T, h Harness) {
	history.RunCrashOneSync(t, func(dir string) (store.Store, error) { return h.OpenOneSync(dir, nil) })
}

// Conformance runs storetest's suite on the store.
func Conformance(t *testing.T, h Harness) {
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) store.Store { return h.OpenT(t, t.TempDir()) },
		IndexKeys: h.IndexKeys,
	})
}

// Crash kills a child writing through the store with SIGKILL 24 times
// and checks every key it reported after each reopen.
func Crash(t *testing.T, h Harness) {
	storetest.RunCrash(t, storetest.CrashHarness{
		Open:    h.open,
		Records: func(t *testing.T, s store.Store) map[string]*store.Record { return h.Records(t, s) },
	})
}

// OpenT opens a store with open on dir, with options o changed by opts in
// turn; it fails t if open fails, and closes the store when t ends.
func OpenT[S store.Store, O any](t testing.TB, open func(string, O) (S, error), dir string, o O, opts ...func(*O)) S {
	t.Helper()
	for _, f := range opts {
		f(&o)
	}
	s, err := open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Opener is Harness.Open for a store opened by open with options o, whose
// wall clock setWall sets.
func Opener[S store.Store, O any](open func(string, O) (S, error), o O, setWall func(*O, func() time.Time)) func(dir string, wall func() time.Time) (store.Store, error) {
	return func(dir string, wall func() time.Time) (store.Store, error) {
		o := o
		setWall(&o, wall)
		return open(dir, o)
	}
}
