package pebblestore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/store"
)

// The full-disk tests run the store on a tmpfs of 12 MiB (the size of the
// gateway's in the report of a store that a full disk broke for good:
// Pebble panicked through its logger's Fatalf on its WAL's failed write,
// and could not open again while the disk was full) and fill it.

// response is key's stored response: 35 KiB, distinct per key, and as
// incompressible as a real response, so that Pebble's tables take as much
// room as its WAL.
func response(key string) []byte {
	b := make([]byte, 0, 35<<10)
	for i := 0; len(b) < 35<<10; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", key, i))
		b = append(b, sum[:]...)
	}
	return b[:35<<10]
}

// tokenOf is key's token in the full-disk tests, the same in a child
// process and in the test that checks its work.
func tokenOf(key string) uint64 {
	sum := sha256.Sum256([]byte("token " + key))
	return binary.BigEndian.Uint64(sum[:])
}

func fullRequest(key string) store.ReserveRequest {
	r := reserveReq(key, time.Hour)
	r.Record.Token = tokenOf(key)
	return r
}

// record reserves key and stores its response. It reports whether the
// reservation was made, if a call failed.
func record(ctx context.Context, s *Store, key string) (reserved bool, err error) {
	req := fullRequest(key)
	res, err := s.Reserve(ctx, req)
	if err != nil {
		return false, err
	}
	if !res.Acquired {
		return false, fmt.Errorf("key %s: not acquired: %+v", key, res.Existing)
	}
	return true, s.Complete(ctx, store.Completion{Fence: fenceOf(req), State: store.Succeeded, Value: response(key), TTL: time.Hour})
}

// fillStore records responses until the disk is full; it returns the
// keys recorded, and the key left reserved by a failed Complete, if any.
func fillStore(t *testing.T, ctx context.Context, s *Store, prefix string) (done []string, reserved string) {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprint(prefix, i)
		ok, err := record(ctx, s, key)
		if err != nil {
			if !errors.Is(err, store.ErrNoSpace) {
				t.Fatalf("record %s on a full disk: %v; want an error matching store.ErrNoSpace", key, err)
			}
			if ok {
				reserved = key
			}
			t.Logf("%d responses of 35 KiB recorded, then: %v", len(done), err)
			return done, reserved
		}
		done = append(done, key)
		if i > 10000 {
			t.Fatal("the disk never filled")
		}
	}
}

// checkReplays checks that every key of done replays its response, by
// Get and by Reserve.
func checkReplays(t *testing.T, ctx context.Context, s *Store, done []string) {
	t.Helper()
	for _, key := range done {
		req := fullRequest(key)
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.State != store.Succeeded || !bytes.Equal(r.Value, response(key)) {
			t.Fatalf("key %s does not replay: %v, state %q, %d bytes", key, err, r.State, len(r.Value))
		}
		req.Record.Token++
		res, err := s.Reserve(ctx, req)
		if err != nil || res.Acquired || !bytes.Equal(res.Existing.Value, response(key)) {
			t.Fatalf("key %s: a retry's Reserve got %v, acquired %v, %d bytes", key, err, res.Acquired, len(res.Existing.Value))
		}
	}
}

// refusals makes n new reservations, 10 ms apart, and checks that each
// fails matching store.ErrNoSpace, in less than 2 s. It returns the
// median and the slowest.
func refusals(t *testing.T, ctx context.Context, s *Store, prefix string, n int) (median, slowest time.Duration) {
	t.Helper()
	var took []time.Duration
	for i := range n {
		begin := time.Now()
		_, err := s.Reserve(ctx, fullRequest(fmt.Sprint(prefix, i)))
		d := time.Since(begin)
		if !errors.Is(err, store.ErrNoSpace) {
			t.Fatalf("a new reservation on a full disk: %v; want an error matching store.ErrNoSpace", err)
		}
		if d > 2*time.Second {
			t.Fatalf("a new reservation on a full disk failed after %v", d)
		}
		took = append(took, d)
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)-1]
}

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
	// tables (see the package doc). 2 MiB of it are freed first.
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast-2m"), 2<<20)
	tmpdisk.Ballast(t, filepath.Join(disk, "ballast-6m"), 6<<20)
	s := openT(t, dir)
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable on an empty store: %v", err)
	}

	done, reserved := fillStore(t, ctx, s, "k")
	if len(done) < 50 {
		t.Fatalf("only %d responses recorded on a disk with about 4 MiB free", len(done))
	}
	median, slowest := refusals(t, ctx, s, "new", 50)
	t.Logf("on the full disk, 50 new reservations were refused in %v (median), %v (slowest)", median, slowest)
	checkReplays(t, ctx, s, done)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable on a full disk: %v, want an error matching store.ErrNoSpace", err)
	}
	if reserved != "" {
		// Its Complete failed: the reservation stands, its outcome may or
		// may not have reached the WAL before the disk filled.
		req := fullRequest(reserved)
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.Token != req.Record.Token || r.State == store.Failed ||
			r.State == store.Succeeded && !bytes.Equal(r.Value, response(reserved)) {
			t.Fatalf("key %s, whose Complete failed: %+v, %v", reserved, r, err)
		}
		t.Logf("the key whose Complete failed reads %s", r.State)
	}
	checkIndex(t, s)

	// Reopened on the full disk, it serves what it holds.
	if err := s.Close(); err != nil {
		t.Logf("Close after a failed write: %v", err)
	}
	s = openT(t, dir)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable after a reopen on the full disk: %v, want an error matching store.ErrNoSpace", err)
	}
	checkIndex(t, s)
	checkReplays(t, ctx, s, done)
	median, slowest = refusals(t, ctx, s, "reopened", 20)
	t.Logf("after a reopen on the full disk, 20 new reservations were refused in %v (median), %v (slowest)", median, slowest)
	s.Close()

	// With 2 MiB free, Open tries read-write, fails when its tables fill
	// the disk, removes them, and opens read-only.
	if err := os.Remove(filepath.Join(disk, "ballast-2m")); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable after a reopen with 2 MiB free: %v, want an error matching store.ErrNoSpace", err)
	}
	if free := tmpdisk.Free(t, disk); free < 3<<19 {
		t.Fatalf("%d bytes free after an open that could not write its tables: it left them behind", free)
	}
	checkReplays(t, ctx, s, done)

	// Room comes back: the store writes again, by itself.
	if err := os.Remove(filepath.Join(disk, "ballast-6m")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	eventually(t, "the store is writable once the disk has room", func() bool { return s.Writable(ctx) == nil })
	t.Logf("with room again, the store was writable %v after it was freed", time.Since(freed))
	var back []string
	for i := range 20 {
		key := fmt.Sprint("more", i)
		if _, err := record(ctx, s, key); err != nil {
			t.Fatalf("record %s with room again: %v", key, err)
		}
		back = append(back, key)
	}
	s.Close()
	s = openT(t, dir)
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable after a reopen with room: %v", err)
	}
	checkIndex(t, s)
	checkReplays(t, ctx, s, append(done, back...))
}

// TestFreshStoreLittleRoom: a new store on a disk with 1 MiB free
// records small responses.
func TestFreshStoreLittleRoom(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 1<<20)
	ctx := context.Background()
	s := openT(t, filepath.Join(disk, "store"))
	for i := range 50 {
		req := fullRequest(fmt.Sprint("k", i))
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatalf("reservation %d with 1 MiB free: %v", i, err)
		}
		if err := s.Complete(ctx, store.Completion{Fence: fenceOf(req), State: store.Succeeded, Value: response(req.Record.Key)[:2<<10], TTL: time.Hour}); err != nil {
			t.Fatalf("response %d of 2 KiB with 1 MiB free: %v", i, err)
		}
	}
	n := 0
	for ; ; n++ {
		if _, err := record(ctx, s, fmt.Sprint("big", n)); err != nil {
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

// TestFullDiskKill kills (SIGKILL) a child that writes to the store while
// the disk fills and stays full, three times, and reopens the store on the
// full disk after each: every response the child was told is recorded
// replays, every reservation it was told of stands, a failed call left
// nothing or its own record, and no key can be reserved twice.
func TestFullDiskKill(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 3<<20)
	ctx := context.Background()
	last := map[string]string{} // key -> last step reported: B, R, C, A, E (reserve refused), F (complete failed)
	for round := range 3 {
		lines := runFullChild(t, dir, round)
		refused := 0
		for _, l := range lines {
			step, key, ok := strings.Cut(l, " ")
			if !ok {
				continue
			}
			key, why, _ := strings.Cut(key, " ")
			switch step {
			case "E", "F":
				if why != "nospace" {
					t.Fatalf("round %d: the child's call on %s failed with %q, not for want of space", round, key, why)
				}
				refused++
			}
			last[key] = step
		}
		s := openT(t, dir)
		counts := map[string]int{}
		for key, step := range last {
			counts[step]++
			req := fullRequest(key)
			r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
			found := err == nil
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
			inProgress := found && r.State == store.InProgress && r.Token == req.Record.Token
			succeeded := found && r.State == store.Succeeded && r.Token == req.Record.Token && bytes.Equal(r.Value, response(key))
			var ok bool
			switch step {
			case "B": // killed in Reserve
				ok = !found || inProgress
			case "R": // reserved, Complete not begun
				ok = inProgress
			case "C", "F": // killed in Complete, or Complete failed: it may have taken effect
				ok = inProgress || succeeded
				if succeeded && step == "F" {
					counts["F that took effect"]++
				}
			case "A":
				ok = succeeded
			case "E":
				// A reservation refused at once wrote nothing; one that
				// failed in its commit may have reached the WAL whole,
				// its group's write failing after it (a failed call may
				// have taken effect): it then holds its key.
				ok = !found || inProgress
				if found {
					counts["E that took effect"]++
				}
			}
			if !ok {
				t.Fatalf("round %d: key %s (last step %s) reads %+v, %v", round, key, step, r, err)
			}
			if found {
				req.Record.Token++
				if res, err := s.Reserve(ctx, req); err != nil || res.Acquired {
					t.Fatalf("round %d: key %s (last step %s) reserved a second time: %+v, %v", round, key, step, res, err)
				}
			}
		}
		checkIndex(t, s)
		s.Close()
		t.Logf("round %d: killed after %d refusals; keys by last step: %v", round, refused, counts)
		if counts["A"] == 0 || refused == 0 {
			t.Fatalf("round %d: %d responses recorded and %d refusals: the disk was not filled", round, counts["A"], refused)
		}
	}
}

// runFullChild runs a child that records responses on dir from four
// goroutines, reporting each step (see fullChild), and kills it with
// SIGKILL once it has been refused for want of space 40 times.
func runFullChild(t *testing.T, dir string, round int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=fill", "IDEM_FILE_TEST_DIR="+dir, fmt.Sprint("IDEM_FILE_TEST_ROUND=", round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	refused := 0
	sc := bufio.NewScanner(stdout)
	timeout := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timeout.Stop()
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "E ") || strings.HasPrefix(sc.Text(), "F ") {
			if refused++; refused == 40 {
				cmd.Process.Kill()
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || refused < 40 {
		t.Fatalf("round %d: child ended with %v after %d refusals\nstderr: %s", round, err, refused, stderr.String())
	}
	return lines
}

// fullChild records responses on dir until it is killed, from four
// goroutines, and reports each step on stdout after the call it reports
// has returned: B key (about to Reserve), R key (reserved), C key (about
// to Complete), A key (recorded), E key why (Reserve failed), F key why
// (Complete failed); why is "nospace" when the error matches
// store.ErrNoSpace.
func fullChild(dir, round string) int {
	s, err := Open(dir, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	ctx := context.Background()
	why := func(err error) string {
		if errors.Is(err, store.ErrNoSpace) {
			return "nospace"
		}
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
	var mu sync.Mutex // one line at a time
	say := func(step, key string, rest ...string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(strings.Join(append([]string{step, key}, rest...), " "))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("%s-%d-%d", round, w, i)
				req := fullRequest(key)
				say("B", key)
				if res, err := s.Reserve(ctx, req); err != nil {
					say("E", key, why(err))
					time.Sleep(5 * time.Millisecond)
					continue
				} else if !res.Acquired {
					fmt.Fprintln(os.Stderr, "not acquired:", key)
					os.Exit(1)
				}
				say("R", key)
				say("C", key)
				if err := s.Complete(ctx, store.Completion{Fence: fenceOf(req), State: store.Succeeded, Value: response(key), TTL: time.Hour}); err != nil {
					say("F", key, why(err))
					continue
				}
				say("A", key)
			}
		}()
	}
	wg.Wait()
	return 0
}
