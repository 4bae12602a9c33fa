package storetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
)

// CrashHarness is what RunCrash needs of a store that lives in a directory
// on this machine (the embedded stores).
type CrashHarness struct {
	// Open opens the store in dir.
	Open func(dir string) (store.Store, error)
	// Records, when set, returns every record of a reopened store in one
	// scan, after checking the store's own index; RunCrash checks keys of
	// earlier rounds there. Without it, every key goes through Get.
	Records func(t *testing.T, s store.Store) map[string]*store.Record
	// Rounds is how many times a child is killed; 0 means 24.
	Rounds int
}

// crashChildEnv marks the test binary as a crash child, and names its
// directory and round.
const (
	crashChildEnv = "IDEM_STORETEST_CRASH_DIR"
	crashRoundEnv = "IDEM_STORETEST_CRASH_ROUND"
)

// CrashChild makes this process a crash child if RunCrash started it as
// one: it writes until it is killed, and never returns. Call it first in
// the package's TestMain, with the same open as the harness.
func CrashChild(open func(dir string) (store.Store, error)) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		return
	}
	os.Exit(crashChild(open, dir, os.Getenv(crashRoundEnv)))
}

// The crash test's child writes keys from crashWorkers goroutines and
// reports each step on stdout, after the call it reports has returned:
//
//	B key  about to Reserve
//	R key  Reserve returned: the in_progress record is durable
//	C key  about to Complete
//	A key  Complete returned: the succeeded record is durable
const crashWorkers = 8

// steps are the child's reports, in order.
const steps = "BRCA"

// crashValue is key's value: distinct per key, of varied length, now and
// then large enough to span several WAL blocks.
func crashValue(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	n := 1 + int(binary.BigEndian.Uint16(sum[:]))%1024
	if sum[2] == 0 {
		n = 100 << 10
	}
	return bytes.Repeat(sum[:], n/len(sum)+1)[:n]
}

func crashToken(key string) uint64 {
	sum := sha256.Sum256([]byte(key))
	return binary.BigEndian.Uint64(sum[:])
}

func crashRequest(key string) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("crash", key), Scope: "crash", Key: key,
			Fingerprint: "fp-" + key, Binding: "POST /crash", State: store.InProgress,
			Token: crashToken(key), RequestID: "req-" + key,
		},
		Lease: time.Minute,
		TTL:   24 * time.Hour,
	}
}

// crashChild runs until it is killed (or 30 s pass, in case the parent
// is gone).
func crashChild(open func(string) (store.Store, error), dir, round string) int {
	s, err := open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	fmt.Println("open")
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for w := range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("%s-%d-%d", round, w, i)
				req := crashRequest(key)
				fmt.Println("B", key)
				if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
					fmt.Fprintln(os.Stderr, "reserve:", key, res, err)
					os.Exit(1)
				}
				fmt.Println("R", key)
				fmt.Println("C", key)
				if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token}, State: store.Succeeded,
					Value: crashValue(key), TTL: req.TTL}); err != nil {
					fmt.Fprintln(os.Stderr, "complete:", key, err)
					os.Exit(1)
				}
				fmt.Println("A", key)
			}
		}()
	}
	wg.Wait()
	return 0
}

// RunCrash kills a writing child with SIGKILL at random moments, reopens
// the directory each time and checks that every acknowledged write
// survived and that nothing else is half-written. The package's TestMain
// must call CrashChild.
func RunCrash(t *testing.T, h CrashHarness) {
	rounds := h.Rounds
	if rounds <= 0 {
		rounds = 24
	}
	dir := t.TempDir()
	seen := map[string]int{} // key -> furthest step reported, an index in steps
	acked := 0
	for round := range rounds {
		// Half the kills fall anywhere, open and WAL recovery included;
		// half while the child is writing.
		afterOpen := round%2 == 1
		delay := time.Duration(rand.Int64N(int64(300 * time.Millisecond)))
		lines, stderr := runAndKill(t, dir, round, afterOpen, delay)
		for _, l := range lines {
			step, key, ok := strings.Cut(l, " ")
			if i := strings.Index(steps, step); ok && len(step) == 1 && i >= 0 {
				seen[key] = max(seen[key], i)
			}
		}

		verifyStart := time.Now()
		s, err := h.Open(dir)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v\nchild stderr: %s", round, err, stderr)
		}
		// Every record reads back and the index matches. Keys from earlier
		// rounds are checked on this full scan; this round's keys go through
		// Get as well.
		var records map[string]*store.Record
		if h.Records != nil {
			records = h.Records(t, s)
		}
		acked = 0
		prefix := fmt.Sprint(round, "-")
		for key, step := range seen {
			if records != nil {
				r, ok := records[store.HashKey("crash", key)]
				checkCrashKey(t, round, key, steps[step], r, ok)
			}
			if records == nil || strings.HasPrefix(key, prefix) {
				req := crashRequest(key)
				r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("round %d: key %s: %v", round, key, err)
				}
				checkCrashKey(t, round, key, steps[step], &r, err == nil)
			}
			if steps[step] == 'A' {
				acked++
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed %v after start (after open: %v); %d keys seen, %d acknowledged in all; verified in %v",
			round, delay, afterOpen, len(seen), acked, time.Since(verifyStart))
	}
	if acked < 100 {
		t.Fatalf("only %d writes acknowledged over %d rounds: the test tested little", acked, rounds)
	}
}

// checkCrashKey checks key's record r (found or not) against the
// furthest step the child reported.
func checkCrashKey(t *testing.T, round int, key string, step byte, r *store.Record, found bool) {
	t.Helper()
	req := crashRequest(key)
	absent := !found
	if found && (r.Token != req.Record.Token || r.Key != key || r.Fingerprint != req.Record.Fingerprint) {
		t.Fatalf("round %d: key %s came back as another record: %+v", round, key, r)
	}
	inProgress := !absent && r.State == store.InProgress && r.Value == nil
	succeeded := !absent && r.State == store.Succeeded && bytes.Equal(r.Value, crashValue(key))
	var ok bool
	switch step {
	case 'B': // Reserve in flight
		ok = absent || inProgress
	case 'R': // Reserve returned, Complete not begun
		ok = inProgress
	case 'C': // Complete in flight
		ok = inProgress || succeeded
	case 'A': // Complete returned
		ok = succeeded
	}
	if !ok {
		var state store.State
		var n int
		if found {
			state, n = r.State, len(r.Value)
		}
		t.Fatalf("round %d: key %s (last step %c): absent %v, state %q, %d value bytes",
			round, key, step, absent, state, n)
	}
}

// runAndKill starts a crash child on dir, SIGKILLs it delay after it
// starts (or after it has opened the store), and returns its stdout lines
// and stderr.
func runAndKill(t *testing.T, dir string, round int, afterOpen bool, delay time.Duration) ([]string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprint(crashRoundEnv, "=", round))
	stdout, stderr := testkit.Start(t, cmd)
	opened := make(chan struct{})
	done := make(chan []string)
	go func() {
		var lines []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "open" {
				close(opened)
			}
			lines = append(lines, sc.Text())
		}
		done <- lines
	}()
	if afterOpen {
		select {
		case <-opened:
		case <-time.After(20 * time.Second):
		}
	}
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	lines := <-done
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended with %v, not by SIGKILL\nstderr: %s", round, err, stderr.String())
	}
	return lines, stderr.String()
}
