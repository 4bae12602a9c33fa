package localtest

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

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/store"
)

// The full-disk tests run the store on a tmpfs of 12 MiB (the size of the
// gateway's in the report of a store that a full disk broke for good) and
// fill it.

// Response is key's stored response: 35 KiB, distinct per key, and as
// incompressible as a real response, so that a store that compresses
// (Pebble's tables) takes as much room for it as one that does not.
func Response(key string) []byte {
	b := make([]byte, 0, 35<<10)
	for i := 0; len(b) < 35<<10; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", key, i))
		b = append(b, sum[:]...)
	}
	return b[:35<<10]
}

// TokenOf is key's token in the full-disk tests, the same in a child
// process and in the test that checks its work.
func TokenOf(key string) uint64 {
	sum := sha256.Sum256([]byte("token " + key))
	return binary.BigEndian.Uint64(sum[:])
}

// FullRequest reserves key, for an hour, on its token (TokenOf).
func FullRequest(key string) store.ReserveRequest {
	r := ReserveReq(key, time.Hour)
	r.Record.Token = TokenOf(key)
	return r
}

// Record reserves key and stores its response. It reports whether the
// reservation was made, if a call failed.
func Record(ctx context.Context, s store.Store, key string) (reserved bool, err error) {
	req := FullRequest(key)
	res, err := s.Reserve(ctx, req)
	if err != nil {
		return false, err
	}
	if !res.Acquired {
		return false, fmt.Errorf("key %s: not acquired: %+v", key, res.Existing)
	}
	return true, s.Complete(ctx, store.Completion{Fence: FenceOf(req), State: store.Succeeded, Value: Response(key), TTL: time.Hour})
}

// FillStore records responses until the disk is full; it returns the
// keys recorded, and the key left reserved by a failed Complete, if any.
func (h Harness) FillStore(t *testing.T, ctx context.Context, s store.Store, prefix string) (done []string, reserved string) {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprint(prefix, i)
		ok, err := Record(ctx, s, key)
		if err != nil {
			if !errors.Is(err, store.ErrNoSpace) {
				t.Fatalf("record %s on a full disk: %v; want an error matching store.ErrNoSpace", key, err)
			}
			if h.ENOSPC && !errors.Is(err, syscall.ENOSPC) {
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

// CheckReplays checks that every key of done replays its response, by
// Get and by Reserve.
func CheckReplays(t *testing.T, ctx context.Context, s store.Store, done []string) {
	t.Helper()
	for _, key := range done {
		req := FullRequest(key)
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if err != nil || r.State != store.Succeeded || !bytes.Equal(r.Value, Response(key)) {
			t.Fatalf("key %s does not replay: %v, state %q, %d bytes", key, err, r.State, len(r.Value))
		}
		req.Record.Token++
		res, err := s.Reserve(ctx, req)
		if err != nil || res.Acquired || !bytes.Equal(res.Existing.Value, Response(key)) {
			t.Fatalf("key %s: a retry's Reserve got %v, acquired %v, %d bytes", key, err, res.Acquired, len(res.Existing.Value))
		}
	}
}

// Refusals makes n new reservations, 10 ms apart (so that some fall due
// for a try at the disk), and checks that each fails matching
// store.ErrNoSpace, in less than 2 s. It returns the median and the
// slowest.
func Refusals(t *testing.T, ctx context.Context, s store.Store, prefix string, n int) (median, slowest time.Duration) {
	t.Helper()
	var took []time.Duration
	for i := range n {
		begin := time.Now()
		_, err := s.Reserve(ctx, FullRequest(fmt.Sprint(prefix, i)))
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

// FullDiskKill kills (SIGKILL) a child that writes to the store while
// the disk fills and stays full, three times, and reopens the store on the
// full disk after each: every response the child was told is recorded
// replays, every reservation it was told of stands, every call refused
// left nothing (or, if FailedCallMayLand, nothing or its own record), and
// no key can be reserved twice.
func FullDiskKill(t *testing.T, h Harness) {
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
		s := h.OpenT(t, dir)
		counts := map[string]int{}
		for key, step := range last {
			counts[step]++
			req := FullRequest(key)
			r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
			found := err == nil
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
			inProgress := found && r.State == store.InProgress && r.Token == req.Record.Token
			succeeded := found && r.State == store.Succeeded && r.Token == req.Record.Token && bytes.Equal(r.Value, Response(key))
			var ok bool
			switch step {
			case "B": // killed in Reserve
				ok = !found || inProgress
			case "R": // reserved, Complete not begun
				ok = inProgress
			case "C": // killed in Complete
				ok = inProgress || succeeded
			case "F": // Complete failed: it may have taken effect, if FailedCallMayLand
				ok = inProgress || h.FailedCallMayLand && succeeded
				if succeeded {
					counts["F that took effect"]++
				}
			case "A":
				ok = succeeded
			case "E":
				// A reservation refused at once wrote nothing; one that
				// failed in its commit may have reached the disk whole,
				// its group's write failing after it: it then holds its
				// key.
				ok = !found || h.FailedCallMayLand && inProgress
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
		h.Records(t, s)
		if err := s.Close(); err != nil && !h.FailedCallMayLand {
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
	cmd := ChildCommand("fill", dir, round)
	stdout, stderr := testkit.Start(t, cmd)
	var lines []string
	refused := 0
	sc := bufio.NewScanner(stdout)
	// A child still writing after a minute is stuck: SIGQUIT makes it
	// print its goroutines (in stderr, below) before it is killed.
	timeout := time.AfterFunc(60*time.Second, func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(2 * time.Second)
		cmd.Process.Kill()
	})
	defer timeout.Stop()
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "E ") || strings.HasPrefix(sc.Text(), "F ") {
			if refused++; refused == 40 {
				cmd.Process.Kill()
			}
		}
	}
	err := cmd.Wait()
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
func fullChild(h Harness, dir, round string) int {
	s, err := h.Open(dir, nil)
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
				req := FullRequest(key)
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
				if err := s.Complete(ctx, store.Completion{Fence: FenceOf(req), State: store.Succeeded, Value: Response(key), TTL: time.Hour}); err != nil {
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

// Writer is a store that says whether it can write.
type Writer interface {
	store.Store
	Writable(ctx context.Context) error
}

// CheckFull checks a store on a full disk: 50 new reservations are
// refused, each at once (Refusals); every key of done replays; and
// Writable says the store cannot write for want of space.
func CheckFull(t *testing.T, ctx context.Context, s Writer, done []string) {
	t.Helper()
	median, slowest := Refusals(t, ctx, s, "new", 50)
	t.Logf("on the full disk, 50 new reservations were refused in %v (median), %v (slowest)", median, slowest)
	CheckReplays(t, ctx, s, done)
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable on a full disk: %v, want an error matching store.ErrNoSpace", err)
	}
}

// RecordMore records n responses, on a disk that has room again, and
// returns their keys.
func RecordMore(t *testing.T, ctx context.Context, s store.Store, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		key := fmt.Sprint("more", i)
		if _, err := Record(ctx, s, key); err != nil {
			t.Fatalf("record %s with room again: %v", key, err)
		}
		keys = append(keys, key)
	}
	return keys
}

// Reopen closes s, opens the store on dir again, checks its index and
// that every key of done replays, and returns the reopened store.
func (h Harness) Reopen(t *testing.T, ctx context.Context, s store.Store, dir string, done []string) Writer {
	t.Helper()
	s.Close()
	s = h.OpenT(t, dir)
	h.Records(t, s)
	CheckReplays(t, ctx, s, done)
	return s.(Writer)
}

// AdmitByRoom checks a store's admission by free space; its headroom must
// be more than 1.5 MiB and low leave it between that and 35 KiB free. A
// new reservation is refused, with an error matching store.ErrNoSpace and
// ENOSPC, while the filesystem has less free than the headroom (after
// low), so that no work starts whose outcome the store has no room for
// (refused runs after the refusals); replays and the outcome of a key
// reserved before are still served and written; Writable says why; and
// once room comes back (back), new reservations are taken again without a
// restart.
func AdmitByRoom(t *testing.T, s Writer, low, refused, back func()) {
	t.Helper()
	ctx := context.Background()
	done := RecordMore(t, ctx, s, 5)
	held := FullRequest("held")
	if _, err := s.Reserve(ctx, held); err != nil {
		t.Fatal(err)
	}
	low()
	for i := range 20 {
		_, err := s.Reserve(ctx, FullRequest(fmt.Sprint("new", i)))
		if !errors.Is(err, store.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("a new reservation with less free than the headroom: %v, want store.ErrNoSpace and ENOSPC", err)
		}
	}
	refused()
	if err := s.Writable(ctx); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Writable with less free than the headroom: %v, want store.ErrNoSpace", err)
	}
	CheckReplays(t, ctx, s, done)
	if err := s.Complete(ctx, store.Completion{Fence: FenceOf(held), State: store.Succeeded, Value: Response("held"), TTL: time.Hour}); err != nil {
		t.Fatalf("the outcome of a key reserved before, with less free than the headroom: %v", err)
	}
	back()
	Eventually(t, "new reservations are taken once the disk has room", func() bool { return s.Writable(ctx) == nil })
	for i := range 5 {
		if _, err := Record(ctx, s, fmt.Sprint("back", i)); err != nil {
			t.Fatalf("a new key with room again: %v", err)
		}
	}
}
