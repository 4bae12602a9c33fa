package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// The multi-process race re-executes the test binary; these variables tell
// a child what to do.
const (
	envChild  = "IDEM_REDISSTORE_RACE_CHILD" // the child's process number, 1..
	envPrefix = "IDEM_REDISSTORE_RACE_PREFIX"
)

const (
	raceProcs      = 3  // children, plus the parent itself
	raceGoroutines = 8  // per process
	raceKeys       = 64 // each raced by every goroutine of every process
)

// TestMultiProcessRace has several OS processes, each with several
// goroutines and its own connection pool, reserve the same keys at the same
// moment: every key must have exactly one winner, whose token is the one
// stored and the one every loser saw.
func TestMultiProcessRace(t *testing.T) {
	t.Parallel()
	if id := os.Getenv(envChild); id != "" {
		raceChild(t, id)
		return
	}
	client := newClient(t, nil)
	s, prefix := newStore(t, client)

	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var children []child
	for i := 1; i <= raceProcs; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessRace$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envChild, i), envPrefix+"="+prefix)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children = append(children, child{cmd, stdin, bufio.NewScanner(stdout)})
	}
	// Wait until every child has connected, then start everybody at once.
	for i, c := range children {
		if !waitLine(c.out, "ready", 30*time.Second) {
			t.Fatalf("child %d never got ready", i+1)
		}
	}
	start := make(chan struct{})
	parentLines := make(chan []string, 1)
	go func() { parentLines <- raceWorkers(s, prefix, 0, start) }()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	close(start)

	lines := <-parentLines
	for i, c := range children {
		for c.out.Scan() {
			if l := c.out.Text(); strings.HasPrefix(l, "won ") || strings.HasPrefix(l, "saw ") || strings.HasPrefix(l, "err ") {
				lines = append(lines, l)
			}
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i+1, err)
		}
	}

	winners := make(map[int][]uint64) // key -> tokens that acquired it
	seen := make(map[int]map[uint64]bool)
	results := 0
	for _, l := range lines {
		var kind string
		var key int
		var tok uint64
		if strings.HasPrefix(l, "err ") {
			t.Errorf("a racer failed: %s", l)
			continue
		}
		if _, err := fmt.Sscanf(l, "%s %d %d", &kind, &key, &tok); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		results++
		if kind == "won" {
			winners[key] = append(winners[key], tok)
		} else {
			if seen[key] == nil {
				seen[key] = map[uint64]bool{}
			}
			seen[key][tok] = true
		}
	}
	if want := (raceProcs + 1) * raceGoroutines * raceKeys; results != want {
		t.Fatalf("%d results, want %d", results, want)
	}
	for k := range raceKeys {
		if len(winners[k]) != 1 {
			t.Errorf("key %d: %d winners %v, want exactly 1", k, len(winners[k]), winners[k])
			continue
		}
		won := winners[k][0]
		if len(seen[k]) != 1 || !seen[k][won] {
			t.Errorf("key %d: losers saw tokens %v, want only the winner's %d", k, seen[k], won)
		}
		r, err := s.Get(context.Background(), "race", raceHash(prefix, k), storetest.T0)
		if err != nil || r.Token != won {
			t.Errorf("key %d: stored token %d (%v), winner %d", k, r.Token, err, won)
		}
	}
	perProc := make([]int, raceProcs+1)
	for _, toks := range winners {
		perProc[toks[0]>>40]++
	}
	t.Logf("%d processes x %d goroutines raced on %d keys: one winner each; wins per process %v",
		raceProcs+1, raceGoroutines, raceKeys, perProc)
}

func raceHash(prefix string, k int) string {
	return store.HashKey("race", fmt.Sprintf("%s-%d", prefix, k))
}

// raceChild is the child's side: connect, say ready, wait for go, race.
func raceChild(t *testing.T, id string) {
	proc, err := strconv.Atoi(id)
	if err != nil {
		t.Fatal(err)
	}
	prefix := os.Getenv(envPrefix)
	s, err := redisstore.New(newClient(t, nil), redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	// Open the pool's connections before the start line, so that the race
	// is not decided by who dials first.
	if _, err := s.Get(context.Background(), "race", raceHash(prefix, 0), storetest.T0); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	start := make(chan struct{})
	fmt.Println("ready")
	if !waitLine(bufio.NewScanner(os.Stdin), "go", 30*time.Second) {
		t.Fatal("no start signal")
	}
	close(start)
	for _, l := range raceWorkers(s, prefix, proc, start) {
		fmt.Println(l)
	}
}

// raceWorkers runs raceGoroutines goroutines, released together once start
// is closed, each reserving every key in its own random order, and reports one line per
// attempt: "won KEY TOKEN", "saw KEY EXISTING_TOKEN" or "err ...".
func raceWorkers(s store.Store, prefix string, proc int, start <-chan struct{}) []string {
	var (
		mu    sync.Mutex
		lines []string
	)
	<-start
	testkit.FanOut(raceGoroutines, func(g int) {
		for _, k := range rand.Perm(raceKeys) {
			key := fmt.Sprintf("%s-%d", prefix, k)
			tok := uint64(proc)<<40 | uint64(g)<<20 | uint64(k)
			rec := store.Record{
				KeyHash: store.HashKey("race", key), Scope: "race", Key: key,
				Fingerprint: "fp", Binding: "b", State: store.InProgress, Token: tok,
				CreatedAt: storetest.T0, UpdatedAt: storetest.T0,
				ExpiresAt: storetest.T0.Add(time.Hour), LeaseUntil: storetest.T0.Add(time.Minute),
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Now: storetest.T0, TakeOverStale: true})
			cancel()
			var l string
			switch {
			case err != nil:
				l = fmt.Sprintf("err %d %v", k, err)
			case res.Acquired:
				l = fmt.Sprintf("won %d %d", k, tok)
			default:
				l = fmt.Sprintf("saw %d %d", k, res.Existing.Token)
			}
			mu.Lock()
			lines = append(lines, l)
			mu.Unlock()
		}
	})
	return lines
}

// waitLine reads lines until one equals want, giving up after d.
func waitLine(sc *bufio.Scanner, want string, d time.Duration) bool {
	found := make(chan bool, 1)
	go func() {
		for sc.Scan() {
			if sc.Text() == want {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		return ok
	case <-time.After(d):
		return false
	}
}
