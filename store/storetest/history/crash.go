package history

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
)

// crashEnv makes the test binary a crash child of RunCrash, and carries
// its instructions (a crashSpec in JSON).
const crashEnv = "IDEM_HISTORY_CRASH"

// crashSpec tells a crash child where its store and its log are, which
// keys to use and how to tell its tokens apart.
type crashSpec struct {
	Dir    string  `json:"dir"`
	Log    string  `json:"log"`
	Prefix string  `json:"prefix"`
	Gens   []int64 `json:"gens"` // the generation of each slot to start at
	High   uint64  `json:"high"`
	Client int     `json:"client"` // the first client's number
}

// crashRounds is how many times RunCrash kills a child.
const crashRounds = 8

// crashConfig is the workload of a crash test's child and parent: fewer
// clients than Check's, for a store that fsyncs every write.
func crashConfig() Config { return Config{Clients: 4, Ops: 40}.WithDefaults() }

// wallClock is the clock of a crash test's history: the wall clock, the
// one clock that the child, the parent and the store reopened after the
// kill share (an embedded store carries leases across a restart on it).
func wallClock() int64 { return time.Now().UnixNano() }

// RunCrash checks the histories of an embedded store across kill -9 and
// restart. A child process (the test binary run again, for this test
// only) opens the store in a directory and runs random operations from
// several clients, logging each call before it is made and each return
// after it, until it is killed with SIGKILL; the test then reopens the
// store, runs more operations on the same keys, closes it, and starts the
// next child. The whole history, every round's, must be linearizable: a
// call the child made and never saw return may or may not have taken
// effect, but only before the kill.
//
// Call it from a test of its own; it starts its children through the
// test's name, so the package needs no TestMain hook. open opens the store
// in dir, in the child and in the test.
func RunCrash(t *testing.T, open func(dir string) (store.Store, error)) {
	verify(t, runCrash(t, open, false))
}

// RunCrashOneSync is RunCrash for a store that returns a reservation that
// may be taken over (ReserveRequest.TakeOverStale) before it is on disk,
// as the embedded stores do with their OneSync option: a kill may lose
// such a reservation, together with its holder, unless a later write of
// its key was synced, and the key is then as it was before it. Everything
// else must survive as RunCrash has it: a completion, a renewal or a
// release that returned, and a reservation that may not be taken over;
// a lost token never comes back.
func RunCrashOneSync(t *testing.T, open func(dir string) (store.Store, error)) {
	verify(t, runCrash(t, open, true))
}

// runCrash records RunCrash's history (RunCrashOneSync's when oneSync is
// set); in a crash child, it runs the child and never returns.
func runCrash(t *testing.T, open func(dir string) (store.Store, error), oneSync bool) *History {
	if spec := os.Getenv(crashEnv); spec != "" {
		os.Exit(crashChild(open, spec))
	}
	dir, logs := t.TempDir(), t.TempDir()
	cfg := crashConfig()
	prefix := keyPrefix()
	h := &History{slack: cfg.Slack}
	cut, atKill := 0, 0
	var gens []int64 // where the workload is, so that each process carries on with the keys of the last
	for round := range crashRounds {
		spec := crashSpec{Dir: dir, Log: filepath.Join(logs, fmt.Sprint(round, ".log")), Prefix: prefix, Gens: gens, High: uint64(2*round+1) << 32, Client: 3 * round * cfg.Clients}
		// A third of the kills fall anywhere, open and recovery
		// included; the others while the child runs operations.
		killed, stderr := killChild(t, spec, round%3 != 0, time.Duration(rand.Int64N(int64(400*time.Millisecond))))
		events, err := readLog(spec.Log)
		if err != nil {
			t.Fatalf("round %d: %v\nchild's stderr: %s", round, err, stderr)
		}
		before := operations(events, killed)
		gens = furthest(gens, events)
		for i, op := range before {
			if op.Return == killed {
				cut++
			}
			if in := op.Input.(input); oneSync && in.Kind == opReserve && in.TakeOver {
				in.Unsynced = true
				before[i].Input = in
			}
		}
		atKill += outstanding(before)
		// The kill, after every call the child made returned or was cut,
		// and before the restart's first.
		crash := input{Kind: opCrash, Call: killed + 1, Return: killed + 2}
		h.ops = append(h.ops, before...)
		h.ops = append(h.ops, porcupine.Operation{ClientId: -1, Input: crash, Call: crash.Call, Output: output{Outcome: outOK}, Return: crash.Return})

		s, err := open(dir)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v\nchild's stderr: %s", round, err, stderr)
		}
		var log eventLog
		w := newWorkload(cfg, prefix, gens, uint64(2*round+2)<<32, wallClock, log.add)
		w.runClients(context.Background(), cfg, (3*round+2)*cfg.Clients, func(int) store.Store { return s })
		after := log.events
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		h.ops = append(h.ops, operations(after, never)...)
		gens = w.generations()
		t.Logf("round %d: %d operations by the child before the kill, %d after the restart", round, len(before), len(after)/2)
	}
	t.Logf("%d calls cut by the kills", cut)
	if oneSync {
		t.Logf("%d reservations returned before their sync and held, not yet completed, renewed or released, when a kill came", atKill)
		if atKill == 0 {
			t.Errorf("no kill came between a reservation returned before its sync and its holder's next write: the test tested little")
		}
	}
	return h
}

// outstanding counts the reservations of ops returned before their sync
// (input.Unsynced) that no Renew, Complete or Release of their token
// followed with success: those a kill at the end of ops came between the
// reservation and its holder's next write.
func outstanding(ops []porcupine.Operation) int {
	held := map[uint64]bool{}
	for _, op := range ops { // sorted by call
		in, out := op.Input.(input), op.Output.(output)
		switch {
		case in.Kind == opReserve && in.Unsynced && out.Acquired:
			held[in.Token] = true
		case in.Kind != opReserve && in.Kind != opGet && out.Outcome == outOK:
			delete(held, in.Token)
		}
	}
	return len(held)
}

// furthest returns gens moved on to the furthest generation of each slot
// that events called on.
func furthest(gens []int64, events []event) []int64 {
	gens = slices.Clone(gens)
	for _, e := range events {
		if e.In == nil {
			continue
		}
		for len(gens) <= e.In.Slot {
			gens = append(gens, 0)
		}
		gens[e.In.Slot] = max(gens[e.In.Slot], e.In.Gen)
	}
	return gens
}

// killChild starts a crash child, kills it with SIGKILL delay after it
// started (or after it opened the store), and returns the time it was
// dead by and its stderr.
func killChild(t *testing.T, spec crashSpec, afterOpen bool, delay time.Duration) (int64, string) {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run="+testPattern(t.Name()))
	cmd.Env = append(os.Environ(), crashEnv+"="+string(js))
	stdout, stderr := testkit.Start(t, cmd)
	opened := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "open" {
				close(opened)
			}
		}
	}()
	if afterOpen {
		select {
		case <-opened:
		case <-done:
		case <-time.After(time.Minute):
		}
	}
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	err = cmd.Wait()
	killed := wallClock()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL\nstderr: %s", err, stderr.String())
	}
	return killed, stderr.String()
}

// testPattern is the -test.run pattern that runs the test named name and
// no other.
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// readLog reads a crash child's log. Its last line may be cut short by the
// kill: a call logged in part was never made, a return logged in part is
// a return lost.
func readLog(path string) ([]event, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // killed before it logged anything
	}
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(b, []byte("\n"))
	var events []event
	for i, l := range lines {
		if len(l) == 0 {
			continue
		}
		var e event
		if err := json.Unmarshal(l, &e); err != nil {
			if i == len(lines)-1 {
				break // the torn last line
			}
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		events = append(events, e)
	}
	return events, nil
}

// crashChild runs operations on the store in its spec until it is killed
// (or a minute passes, in case the test is gone), logging each call and
// return with one write each. A write reaches the kernel before the call
// it logs starts (or after the return it logs), and a SIGKILL loses
// nothing the kernel has: no fsync is needed.
func crashChild(open func(string) (store.Store, error), js string) int {
	var spec crashSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	f, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	s, err := open(spec.Dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child: open:", err)
		return 2
	}
	fmt.Println("open")
	var mu sync.Mutex
	cfg := crashConfig()
	cfg.Clients *= 2 // more calls in flight when the kill comes
	w := newWorkload(cfg, spec.Prefix, spec.Gens, spec.High, wallClock, func(e event) {
		b, err := json.Marshal(e)
		if err == nil {
			mu.Lock()
			_, err = f.Write(append(b, '\n'))
			mu.Unlock()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash child: log:", err)
			os.Exit(2)
		}
	})
	w.busy = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(spec.Client+i, s).run(ctx, -1)
		}()
	}
	wg.Wait()
	return 0
}
