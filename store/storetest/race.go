package storetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
)

// ProcessRace races OS processes on the same keys of one shared store: the
// test binary re-runs itself as children, each opening its own client of
// the store from a configuration string passed in the environment. Every
// racer of every process reserves every key; each key must have exactly
// one winner, whose token the store keeps and every loser saw.
//
// Declare one as a package variable, start children from TestMain with
// Child, and run the race from a test with Run:
//
//	var race = storetest.ProcessRace{Name: "PG", Open: openFromDSN}
//
//	func TestMain(m *testing.M) { race.Child(); goleak.VerifyTestMain(m) }
//
//	func TestMultiProcessRace(t *testing.T) { race.Run(t, s, dsn) }
type ProcessRace struct {
	// Name keeps the environment variables of races in different packages
	// apart: IDEM_RACE_<Name>_CHILD and so on.
	Name string
	// Open opens a client of the store from the configuration given to Run
	// (a DSN, a schema, JSON...). It runs in every child; the returned
	// function closes what Open opened.
	Open func(ctx context.Context, config string) (store.Store, func(), error)
	// Procs is the number of children, besides the test's own process,
	// which races too; 0 means 3.
	Procs int
	// Goroutines is the number of racers per process; 0 means 8.
	Goroutines int
	// Keys is the number of keys raced; 0 means 24.
	Keys int
	// Interval spaces the keys: every racer of every process reserves key
	// k at start + k*Interval, a barrier across processes made of the wall
	// clock, so that each key is raced by everybody at once. 0 means 100 ms.
	Interval time.Duration
	// Request returns racer (proc, g)'s reservation of key k. Its token must
	// be unique among racers. nil means RaceRequest.
	Request func(config string, proc, g, k int) store.ReserveRequest
	// Check, when not nil, makes the store's own checks after the generic
	// ones (say, that the winner of a stale key took it over).
	Check func(t *testing.T, s store.Store, config string, results []RaceResult)
}

// RaceResult is what one racer saw for one key.
type RaceResult struct {
	Proc     int    `json:"proc"`
	G        int    `json:"g"`
	Key      int    `json:"key"`
	Acquired bool   `json:"acquired"`
	TookOver bool   `json:"took_over,omitempty"`
	Token    uint64 `json:"token"` // its own when acquired, else the holder's
	Err      string `json:"err,omitempty"`
}

// RaceRequest is the default ProcessRace.Request: key "race-k" in scope
// "race", reserved with a one-minute lease and takeover allowed.
func RaceRequest(_ string, proc, g, k int) store.ReserveRequest {
	key := "race-" + strconv.Itoa(k)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("race", key), Scope: "race", Key: key,
			Fingerprint: "fp", Binding: "POST /race", State: store.InProgress,
			Token:     uint64(proc+1)<<40 | uint64(g)<<20 | uint64(k),
			RequestID: "proc-" + strconv.Itoa(proc),
		},
		Lease: time.Minute, TTL: time.Hour, TakeOverStale: true,
	}
}

func (r *ProcessRace) env(what string) string { return "IDEM_RACE_" + r.Name + "_" + what }

func (r *ProcessRace) defaults() ProcessRace {
	c := *r
	if c.Procs <= 0 {
		c.Procs = 3
	}
	if c.Goroutines <= 0 {
		c.Goroutines = 8
	}
	if c.Keys <= 0 {
		c.Keys = 24
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Request == nil {
		c.Request = RaceRequest
	}
	return c
}

// Child makes the process a racer and exits it, when it was started as one
// of r's children; otherwise it returns at once. Call it first in TestMain.
//
// A child opens its store, says "ready" on stdout, reads the start time
// from stdin, races, writes its results as JSON lines to the file the
// parent named, and exits 0 (2 when it could not race).
func (r *ProcessRace) Child() {
	id := os.Getenv(r.env("CHILD"))
	if id == "" {
		return
	}
	os.Exit(r.child(id))
}

func (r *ProcessRace) child(id string) int {
	c := r.defaults()
	proc, _ := strconv.Atoi(id)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "racer %d: %v\n", proc, err)
		return 2
	}
	config := os.Getenv(r.env("CONFIG"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, closeFn, err := c.Open(ctx, config)
	if err != nil {
		return fail(err)
	}
	defer closeFn()
	fmt.Println("ready")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("no start: %w", err))
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "go ")), 10, 64)
	if err != nil {
		return fail(fmt.Errorf("bad start line %q", line))
	}
	results := c.race(ctx, s, config, proc, time.Unix(0, ns))
	f, err := os.Create(os.Getenv(r.env("OUT")))
	if err != nil {
		return fail(err)
	}
	enc := json.NewEncoder(f)
	for _, res := range results {
		if err := enc.Encode(res); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	return 0
}

// race runs c.Goroutines racers of process proc.
func (c ProcessRace) race(ctx context.Context, s store.Store, config string, proc int, start time.Time) []RaceResult {
	var (
		mu  sync.Mutex
		out []RaceResult
		wg  sync.WaitGroup
	)
	for g := range c.Goroutines {
		wg.Go(func() {
			for k := range c.Keys {
				time.Sleep(time.Until(start.Add(time.Duration(k) * c.Interval)))
				req := c.Request(config, proc, g, k)
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := s.Reserve(rctx, req)
				cancel()
				r := RaceResult{Proc: proc, G: g, Key: k, Acquired: res.Acquired, TookOver: res.TookOver, Token: res.Existing.Token}
				if res.Acquired {
					r.Token = req.Record.Token
				}
				if err != nil {
					r.Err = err.Error()
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// Run races r.Procs children and this process, whose client of the store
// is s, on config's store, checks the outcome, and returns every result.
func (r *ProcessRace) Run(t *testing.T, s store.Store, config string) []RaceResult {
	t.Helper()
	c := r.defaults()
	dir := t.TempDir()
	var children []*testkit.Child
	for p := 1; p <= c.Procs; p++ {
		children = append(children, testkit.StartChild(t, r.env("CHILD")+"="+strconv.Itoa(p), r.env("CONFIG")+"="+config,
			r.env("OUT")+"="+filepath.Join(dir, strconv.Itoa(p)+".jsonl")))
	}
	// Start everybody once every child has opened its store.
	for i, ch := range children {
		if !ch.WaitLine("ready", time.Minute) {
			t.Fatalf("racer %d never got ready", i+1)
		}
	}
	start := time.Now().Add(200 * time.Millisecond)
	for _, ch := range children {
		if _, err := fmt.Fprintf(ch.Stdin, "go %d\n", start.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	results := c.race(context.Background(), s, config, 0, start)
	for i, ch := range children {
		if err := ch.Cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v", i+1, err)
		}
		f, err := os.Open(filepath.Join(dir, strconv.Itoa(i+1)+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(f)
		for dec.More() {
			var res RaceResult
			if err := dec.Decode(&res); err != nil {
				t.Fatal(err)
			}
			results = append(results, res)
		}
		f.Close()
	}
	c.check(t, s, config, results)
	if c.Check != nil {
		c.Check(t, s, config, results)
	}
	return results
}

// check makes the checks every store must pass.
func (c ProcessRace) check(t *testing.T, s store.Store, config string, results []RaceResult) {
	t.Helper()
	if want := (c.Procs + 1) * c.Goroutines * c.Keys; len(results) != want {
		t.Fatalf("%d results, want %d", len(results), want)
	}
	winners := make(map[int][]RaceResult)
	for _, r := range results {
		if r.Err != "" {
			t.Errorf("racer %d/%d, key %d: %s", r.Proc, r.G, r.Key, r.Err)
		}
		if r.Acquired {
			winners[r.Key] = append(winners[r.Key], r)
		}
	}
	wins := make([]int, c.Procs+1)
	for k := range c.Keys {
		w := winners[k]
		if len(w) != 1 {
			t.Errorf("key %d: %d winners %+v, want exactly 1", k, len(w), w)
			continue
		}
		wins[w[0].Proc]++
		req := c.Request(config, 0, 0, k)
		got, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		if err != nil || got.Token != w[0].Token {
			t.Errorf("key %d: stored token %d (%v), the winner's is %d", k, got.Token, err, w[0].Token)
		}
	}
	for _, r := range results {
		if w := winners[r.Key]; len(w) == 1 && r.Token != w[0].Token {
			t.Errorf("racer %d/%d saw token %d for key %d, the winner holds %d", r.Proc, r.G, r.Token, r.Key, w[0].Token)
		}
	}
	t.Logf("%d racers in %d processes, %d keys: one winner each; wins per process %v",
		(c.Procs+1)*c.Goroutines, c.Procs+1, c.Keys, wins)
}
