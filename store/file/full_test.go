package file

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
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
// gateway's in the report of a store that a full disk broke for good) and
// fill it.

// response is key's stored response: 35 KiB, distinct per key.
func response(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return bytes.Repeat(sum[:], 35<<10/len(sum))
}

// tokenOf is key's token in the full-disk tests, the same in a child
// process and in the test that checks its work.
func tokenOf(key string) uint64 {
	sum := sha256.Sum256([]byte("token " + key))
	return uint64(sum[0])<<56 | uint64(sum[1])<<48 | uint64(sum[2])<<40 | uint64(sum[3])<<32 |
		uint64(sum[4])<<24 | uint64(sum[5])<<16 | uint64(sum[6])<<8 | uint64(sum[7])
}

func fullRequest(key string) store.ReserveRequest {
	r := reserveReq(key, time.Hour)
	r.Record.Token = tokenOf(key)
	return r
}

// record reserves key and stores its response. It reports which call
// failed, if one did.
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
			if !errors.Is(err, store.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("record %s on a full disk: %v; want an error matching store.ErrNoSpace and ENOSPC", key, err)
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

// refusals makes n new reservations, 10 ms apart (so that some fall due
// for a try at the disk), and checks that each fails matching
// store.ErrNoSpace, in less than 2 s. It returns the median and the
// slowest.
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

	done, reserved := fillStore(t, ctx, s, "k")
	if len(done) < 100 {
		t.Fatalf("only %d responses recorded on a disk with about 10 MiB free", len(done))
	}
	median, slowest := refusals(t, ctx, s, "new", 50)
	t.Logf("on the full disk, 50 new reservations were refused in %v (median), %v (slowest)", median, slowest)
	checkReplays(t, ctx, s, done)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable on a full disk: %v, want an error matching store.ErrNoSpace", err)
	}
	if reserved != "" {
		// Its Complete failed: the reservation stands, without an outcome.
		req := fullRequest(reserved)
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
	checkReplays(t, ctx, s, done)
	if _, err := record(ctx, s, "after-reopen"); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("recording after a reopen on the full disk: %v", err)
	}
	median, slowest = refusals(t, ctx, s, "reopened", 20)
	t.Logf("after a reopen on the full disk, 20 new reservations were refused in %v (median), %v (slowest)", median, slowest)

	// Room comes back: the store writes again, by itself.
	if err := os.Remove(filepath.Join(disk, "ballast")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	var back []string
	eventually(t, "a response is recorded once the disk has room", func() bool {
		key := fmt.Sprint("back", len(back), "-", time.Since(freed))
		_, err := record(ctx, s, key)
		if err == nil {
			back = append(back, key)
		}
		return err == nil
	})
	t.Logf("with room again, the store recorded a response %v after it was freed", time.Since(freed))
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable once a write succeeded: %v", err)
	}
	for i := range 20 {
		key := fmt.Sprint("more", i)
		if _, err := record(ctx, s, key); err != nil {
			t.Fatalf("record %s with room again: %v", key, err)
		}
		back = append(back, key)
	}
	s.Close()
	s = openT(t, dir)
	checkIndex(t, s)
	checkReplays(t, ctx, s, append(done, back...))
}

// TestFreshStoreLittleRoom: a new store on a disk with 1 MiB free
// records responses. Zeros are written ahead of the log only when the
// disk has room to spare, so preallocation never takes the room that the
// frames need.
func TestFreshStoreLittleRoom(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 1<<20)
	if free := tmpdisk.Free(t, disk); free > 1<<20 {
		t.Fatalf("%d bytes free, want 1 MiB", free)
	}
	ctx := context.Background()
	s := openT(t, filepath.Join(disk, "store"))
	var done []string
	for i := range 20 {
		key := fmt.Sprint("k", i)
		if _, err := record(ctx, s, key); err != nil {
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
	checkReplays(t, ctx, s, done)
}

// TestFailedFillGivesRoomBack: a zero-fill that fails for want of room
// (another process took it after the fill checked) cuts off what its
// piece had taken, so the frames still have it.
func TestFailedFillGivesRoomBack(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 2<<20)
	ctx := context.Background()
	s := openT(t, filepath.Join(disk, "store"))
	// The fill is told of plenty of room: its first piece of 1 MiB fits,
	// its second does not.
	s.log.freeBytes = func() (int64, error) { return math.MaxInt64, nil }
	if _, err := s.Reserve(ctx, fullRequest("first")); err != nil {
		t.Fatal(err)
	}
	s.log.fills.Wait()
	s.log.freeBytes = func() (int64, error) { return freeBytes(disk) }
	if free := tmpdisk.Free(t, disk); free < 768<<10 {
		t.Fatalf("after a failed zero-fill, %d bytes free, want the second piece's room back (about 1 MiB)", free)
	}
	done, _ := fillStore(t, ctx, s, "k")
	if len(done) < 40 {
		t.Fatalf("%d responses of 35 KiB recorded in 2 MiB after a failed fill", len(done))
	}
}

// TestFullDiskKill kills (SIGKILL) a child that writes to the store while
// the disk fills and stays full, three times, and reopens the store on the
// full disk after each: every response the child was told is recorded
// replays, every reservation it was told of stands, every call refused
// left nothing, and no key can be reserved twice.
func TestFullDiskKill(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 3<<20)
	ctx := context.Background()
	last := map[string]string{} // key -> last step reported: B, R, A, E (reserve refused), F (complete failed)
	for round := range 3 {
		lines := runFullChild(t, dir, round)
		refused := 0
		for _, l := range lines {
			step, key, ok := strings.Cut(l, " ")
			if !ok {
				continue
			}
			key, nospace, _ := strings.Cut(key, " ")
			switch step {
			case "E", "F":
				if nospace != "nospace" {
					t.Fatalf("round %d: the child's call on %s failed with %q, not for want of space", round, key, nospace)
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
			case "R", "F": // reserved; Complete not begun, or failed
				ok = inProgress
			case "C": // killed in Complete
				ok = inProgress || succeeded
			case "A":
				ok = succeeded
			case "E":
				ok = !found
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
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
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
	if _, err := record(ctx, s, "before"); err != nil {
		t.Fatal(err)
	}
	s.log.fills.Wait()
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 100<<10)
	// Two frames in one sync: a reservation of x, which fits, then a
	// record of y with 200 KiB, which does not.
	frame := func(key string, value []byte) []byte {
		r := fullRequest(key).Record
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
		req := fullRequest(key)
		if r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("key %s of the failed sync reads %+v, %v after a reopen", key, r, err)
		}
	}
	checkReplays(t, ctx, s, []string{"before"})
	if err := os.Remove(filepath.Join(disk, "ballast")); err != nil {
		t.Fatal(err)
	}
	if _, err := record(ctx, s, "after"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	checkIndex(t, s)
	checkReplays(t, ctx, s, []string{"before", "after"})
}
