package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testenv"
	"github.com/idem-dev/idem/store"
)

// The environment of a racer process (TestMain hands control to raceChild
// when raceChildEnv is set).
const (
	raceChildEnv = "IDEM_PG_RACE_CHILD" // the racer's number
	raceDSNEnv   = "IDEM_PG_RACE_DSN"
	raceSchema   = "IDEM_PG_RACE_SCHEMA"
	raceStartEnv = "IDEM_PG_RACE_START" // unix nanoseconds at which to start
	raceOutEnv   = "IDEM_PG_RACE_OUT"   // file for the results
)

const (
	raceProcs      = 4  // processes besides the test's own
	raceGoroutines = 8  // per process
	raceKeys       = 24 // every racer reserves every key
	// Key k is raced at start + k*raceInterval by every racer at once: a
	// barrier across processes made of the wall clock.
	raceInterval = 100 * time.Millisecond
)

// raceResult is what one racer saw for one key.
type raceResult struct {
	Proc     int    `json:"proc"`
	Key      int    `json:"key"`
	Acquired bool   `json:"acquired"`
	Token    uint64 `json:"token"` // its own when acquired, else the holder's
	Err      string `json:"err,omitempty"`
}

// TestMultiProcessRace has several OS processes (this test binary, re-run),
// each with several goroutines and its own pool, reserve the same keys at
// the same moments. Every key must have exactly one winner, and every loser
// must have seen the winner's token.
func TestMultiProcessRace(t *testing.T) {
	dsn := testenv.Postgres(t)
	pool := testPool(t, raceGoroutines)
	opts := freshSchema(t, pool)
	dir := t.TempDir()
	start := time.Now().Add(2 * time.Second) // time for the children to start and connect

	var procs []*exec.Cmd
	for p := 1; p <= raceProcs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			raceChildEnv+"="+strconv.Itoa(p), raceDSNEnv+"="+dsn, raceSchema+"="+opts.Schema,
			raceStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10),
			raceOutEnv+"="+filepath.Join(dir, fmt.Sprintf("racer-%d.jsonl", p)))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	// This process races too.
	mine, err := race(context.Background(), pool, opts, 0, start)
	if err != nil {
		t.Fatal(err)
	}
	results := mine
	for p, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v", p+1, err)
		}
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("racer-%d.jsonl", p+1)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r raceResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			results = append(results, r)
		}
		f.Close()
	}

	if want := (raceProcs + 1) * raceGoroutines * raceKeys; len(results) != want {
		t.Fatalf("%d results, want %d", len(results), want)
	}
	winners := make(map[int][]raceResult)
	for _, r := range results {
		if r.Err != "" {
			t.Fatalf("racer %d, key %d: %s", r.Proc, r.Key, r.Err)
		}
		if r.Acquired {
			winners[r.Key] = append(winners[r.Key], r)
		}
	}
	procsWon := make(map[int]int)
	for k := range raceKeys {
		w := winners[k]
		if len(w) != 1 {
			t.Fatalf("key %d: %d winners %+v, want exactly 1", k, len(w), w)
		}
		procsWon[w[0].Proc]++
	}
	for _, r := range results {
		if tok := winners[r.Key][0].Token; r.Token != tok {
			t.Fatalf("racer %d saw token %d for key %d, the winner holds %d", r.Proc, r.Token, r.Key, tok)
		}
	}
	// And the table agrees.
	s := newTestStore(t, pool, opts)
	for k := range raceKeys {
		got, err := s.Get(context.Background(), "race", store.HashKey("race", strconv.Itoa(k)), storeT0)
		if err != nil || got.Token != winners[k][0].Token {
			t.Fatalf("key %d in the table: token %d, %v; want %d", k, got.Token, err, winners[k][0].Token)
		}
	}
	t.Logf("%d racers in %d processes, %d keys: one winner each; wins per process %v; reserve re-runs in this process: %d",
		(raceProcs+1)*raceGoroutines, raceProcs+1, raceKeys, procsWon, raceRetries)
}

// raceRetries is how often this process's racers had to re-run the
// reserve statement.
var raceRetries int64

var storeT0 = time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)

// race runs raceGoroutines racers of process proc, starting at start.
func race(ctx context.Context, pool *pgxpool.Pool, opts Options, proc int, start time.Time) ([]raceResult, error) {
	s, err := New(pool, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// Open every connection before the start, so that the race is
	// between statements, not between connection set-ups.
	var conns []*pgxpool.Conn
	for range raceGoroutines {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	var (
		mu      sync.Mutex
		results []raceResult
		wg      sync.WaitGroup
	)
	for range raceGoroutines {
		wg.Go(func() {
			for k := range raceKeys {
				time.Sleep(time.Until(start.Add(time.Duration(k) * raceInterval)))
				key := strconv.Itoa(k)
				req := store.ReserveRequest{
					Record: store.Record{
						KeyHash: store.HashKey("race", key), Scope: "race", Key: key,
						Fingerprint: "fp", Binding: "POST /race", State: store.InProgress,
						Token: mrand.Uint64(), RequestID: fmt.Sprintf("proc-%d", proc),
						CreatedAt: storeT0, UpdatedAt: storeT0,
						ExpiresAt: storeT0.Add(time.Hour), LeaseUntil: storeT0.Add(time.Minute),
					},
					Now: storeT0, TakeOverStale: true,
				}
				res, err := s.Reserve(ctx, req)
				r := raceResult{Proc: proc, Key: k, Acquired: res.Acquired, Token: res.Existing.Token}
				if res.Acquired {
					r.Token = req.Record.Token
				}
				if err != nil {
					r.Err = err.Error()
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if proc == 0 {
		raceRetries = s.retries.Load()
	}
	return results, nil
}

// raceChild is the body of a racer process: it races, writes its results
// as JSON lines, and returns the exit code.
func raceChild() int {
	proc, _ := strconv.Atoi(os.Getenv(raceChildEnv))
	startNs, _ := strconv.ParseInt(os.Getenv(raceStartEnv), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "racer %d: %v\n", proc, err)
		return 1
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(raceDSNEnv))
	if err != nil {
		return fail(err)
	}
	cfg.MaxConns = raceGoroutines
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	results, err := race(ctx, pool, Options{Schema: os.Getenv(raceSchema)}, proc, time.Unix(0, startNs))
	if err != nil {
		return fail(err)
	}
	f, err := os.Create(os.Getenv(raceOutEnv))
	if err != nil {
		return fail(err)
	}
	enc := json.NewEncoder(f)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	return 0
}
