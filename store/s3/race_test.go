package s3store_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
)

// The environment of a racer process (TestMain hands control to raceChild
// when raceChildEnv is set).
const (
	raceChildEnv  = "IDEM_S3_RACE_CHILD" // the racer's number
	raceServerEnv = "IDEM_S3_RACE_SERVER"
	raceStartEnv  = "IDEM_S3_RACE_START" // unix nanoseconds at which key 0 is raced
	raceOutEnv    = "IDEM_S3_RACE_OUT"
)

const (
	raceProcs      = 3  // processes besides the test's own
	raceGoroutines = 8  // per process
	raceKeys       = 12 // odd keys start as stale records: a takeover race
	// Key k is raced at start + k*raceInterval by every racer at once: a
	// barrier across processes made of the wall clock.
	raceInterval = 150 * time.Millisecond
)

// raceConfig tells a racer where the store is.
type raceConfig struct {
	Endpoint, Key, Secret, Bucket, Prefix string
}

type raceResult struct {
	Proc     int    `json:"proc"`
	Key      int    `json:"key"`
	Acquired bool   `json:"acquired"`
	TookOver bool   `json:"took_over"`
	Token    uint64 `json:"token"` // its own when acquired, else the holder's
	Err      string `json:"err,omitempty"`
}

func raceKey(prefix string, k int) string { return prefix + "race-" + strconv.Itoa(k) }

// raceRequest is racer (proc, g)'s reservation of key k, five minutes
// after the stale records' reservation.
func raceRequest(prefix string, proc, g, k int) store.ReserveRequest {
	now := t0.Add(5 * time.Minute)
	key := raceKey(prefix, k)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("race", key), Scope: "race", Key: key, Fingerprint: "fp", Binding: "b",
			State: store.InProgress, Token: uint64(proc)<<32 | uint64(g)<<16 | uint64(k) + 1,
			CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour), LeaseUntil: now.Add(time.Minute),
		},
		Now:           now,
		TakeOverStale: true,
	}
}

// runRacer races every key from one process and returns what it saw.
func runRacer(s store.Store, prefix string, proc int, start time.Time) []raceResult {
	var (
		mu  sync.Mutex
		out []raceResult
	)
	for k := range raceKeys {
		time.Sleep(time.Until(start.Add(time.Duration(k) * raceInterval)))
		var wg sync.WaitGroup
		for g := range raceGoroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := raceRequest(prefix, proc, g, k)
				res, err := s.Reserve(context.Background(), req)
				r := raceResult{Proc: proc, Key: k, Acquired: res.Acquired, TookOver: res.TookOver, Token: res.Existing.Token}
				if res.Acquired {
					r.Token = req.Record.Token
				}
				if err != nil {
					r.Err = err.Error()
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	return out
}

// raceChild is a racer process: the test binary, started by
// TestMultiProcessRace.
func raceChild() int {
	proc, _ := strconv.Atoi(os.Getenv(raceChildEnv))
	var cfg raceConfig
	if err := json.Unmarshal([]byte(os.Getenv(raceServerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "race child:", err)
		return 2
	}
	ns, _ := strconv.ParseInt(os.Getenv(raceStartEnv), 10, 64)
	srv := &server{endpoint: cfg.Endpoint, key: cfg.Key, secret: cfg.Secret, bucket: cfg.Bucket}
	s, err := s3store.New(srv.client(nil), s3store.Options{Bucket: cfg.Bucket, Prefix: cfg.Prefix})
	if err != nil {
		fmt.Fprintln(os.Stderr, "race child:", err)
		return 2
	}
	results := runRacer(s, cfg.Prefix, proc, time.Unix(0, ns))
	f, err := os.Create(os.Getenv(raceOutEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "race child:", err)
		return 2
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range results {
		_ = enc.Encode(r)
	}
	transport.CloseIdleConnections()
	return 0
}

// TestMultiProcessRace has several OS processes (this test binary, re-run),
// each with its own S3 client and several goroutines, reserve the same keys
// at the same moments: fresh keys (a create race) and stale records (a
// takeover race). Nothing but the server's conditional writes coordinates
// them. Every key must have exactly one winner, and every loser must have
// seen the winner's token.
func TestMultiProcessRace(t *testing.T) {
	srv := realServer(t)
	s := newStore(t, srv, nil)
	prefix := s.Options().Prefix
	for k := 1; k < raceKeys; k += 2 { // the stale records
		req := raceRequest(prefix, 99, 0, k)
		req.Now = t0
		req.Record.LeaseUntil = t0.Add(time.Minute)
		req.Record.ExpiresAt = t0.Add(time.Hour)
		mustAcquire(t, s, req)
	}
	cfg, _ := json.Marshal(raceConfig{Endpoint: srv.endpoint, Key: srv.key, Secret: srv.secret, Bucket: srv.bucket, Prefix: prefix})
	dir := t.TempDir()
	start := time.Now().Add(1500 * time.Millisecond) // time for the children to start
	var cmds []*exec.Cmd
	for p := 1; p <= raceProcs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			raceChildEnv+"="+strconv.Itoa(p),
			raceServerEnv+"="+string(cfg),
			raceStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10),
			raceOutEnv+"="+filepath.Join(dir, strconv.Itoa(p)+".jsonl"))
		cmd.Stderr = os.Stderr
		setParentDeathSignal(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	results := runRacer(s, prefix, 0, start)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v", i+1, err)
		}
		f, err := os.Open(filepath.Join(dir, strconv.Itoa(i+1)+".jsonl"))
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
	for k := range raceKeys {
		var winners []raceResult
		seen := map[uint64]int{}
		procs := map[int]bool{}
		for _, r := range results {
			if r.Key != k {
				continue
			}
			if r.Err != "" {
				t.Errorf("key %d, racer %d: %s", k, r.Proc, r.Err)
			}
			if r.Acquired {
				winners = append(winners, r)
			}
			seen[r.Token]++
			procs[r.Proc] = true
		}
		if len(winners) != 1 {
			t.Errorf("key %d: %d winners across %d processes, want 1: %+v", k, len(winners), len(procs), winners)
			continue
		}
		if len(seen) != 1 {
			t.Errorf("key %d: racers saw %d different tokens, want the winner's only", k, len(seen))
		}
		if stale := k%2 == 1; winners[0].TookOver != stale {
			t.Errorf("key %d: the winner's TookOver is %v, want %v", k, winners[0].TookOver, stale)
		}
	}
}
