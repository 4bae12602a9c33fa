package s3store_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
)

// The crash test's children are this test binary, re-run with these
// variables.
const (
	crashChildEnv  = "IDEM_S3_SEED004_CHILD" // "crash" or "retry"
	crashConfigEnv = "IDEM_S3_SEED004_CONFIG"
)

// crashRetries processes retry every key at once after the crashes.
const crashRetries = 8

// crashLease is the lease of the crash test's submitters: the retriers
// take a dead submitter's key over once they have watched its record
// unchanged for that long (S3 has no clock for leases).
const crashLease = 2 * time.Second

// crashConfig tells a child where the queue is and what to submit.
type crashConfig struct {
	Endpoint, Key, Secret, Bucket, Prefix string
	Keys                                  []string
}

// TestTaskQueueCrashBetweenTaskAndRecord: a submitter killed with SIGKILL
// after writing its task but before completing its record, 20 times (one
// key each); then 8 processes retry every key at once, after the dead
// submitters' leases. Every key must end with one task object, the one the
// dead submitter wrote, and every retry must get its ID. Before tasks were
// named by the record's identity, each of these crashes made a second task.
func TestTaskQueueCrashBetweenTaskAndRecord(t *testing.T) {
	t.Parallel()
	crashRounds := 20 // submitters killed between their task and their record
	if os.Getenv("IDEM_LONG") != "" {
		crashRounds = 100
	}
	srv := realServer(t)
	s := newStore(t, srv, nil)
	cfg := crashConfig{Endpoint: srv.endpoint, Key: srv.key, Secret: srv.secret, Bucket: srv.bucket, Prefix: s.Options().Prefix}
	for i := range crashRounds {
		cfg.Keys = []string{fmt.Sprintf("charge-ORD-%d", i)}
		out := startCrashChild(t, "crash", cfg)
		if !out.WaitLine("task-written", 30*time.Second) {
			t.Fatalf("round %d: the submitter never wrote its task", i)
		}
		// Somewhere between the task and the record's completion.
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		_ = out.Cmd.Process.Kill()
		_ = out.Cmd.Wait()
	}
	tasksBefore := taskObjects(t, srv, cfg.Prefix)
	if len(tasksBefore) != crashRounds {
		t.Fatalf("%d task objects after the crashes, want %d", len(tasksBefore), crashRounds)
	}

	// The retries, once each retrier has watched the dead submitters'
	// records for a lease (see crashChildMain).
	cfg.Keys = nil
	for i := range crashRounds {
		cfg.Keys = append(cfg.Keys, fmt.Sprintf("charge-ORD-%d", i))
	}
	var children []*testkit.Child
	for range crashRetries {
		children = append(children, startCrashChild(t, "retry", cfg))
	}
	testkit.ReleaseTogether(t, children...)
	got := map[string]map[string]int{} // key -> task ID -> submissions
	for i, c := range children {
		for l := range c.Lines {
			key, id, ok := strings.Cut(l, " ")
			if !ok || strings.HasSuffix(key, "-error:") {
				t.Errorf("retrier %d: %s", i, l)
				continue
			}
			if got[key] == nil {
				got[key] = map[string]int{}
			}
			got[key][id]++
		}
		if err := c.Cmd.Wait(); err != nil {
			t.Fatalf("retrier %d: %v", i, err)
		}
	}
	for _, key := range cfg.Keys {
		want := idem.RecordID("charge_customer", key)
		if len(got[key]) != 1 || got[key][want] != crashRetries {
			t.Errorf("%s: task IDs %v, want %s from all %d retriers", key, got[key], want, crashRetries)
		}
		r, err := s.Get(context.Background(), "charge_customer", store.HashKey("charge_customer", key))
		if err != nil || r.State != store.Succeeded {
			t.Errorf("%s: record %+v, %v", key, r, err)
		}
	}
	tasks := taskObjects(t, srv, cfg.Prefix)
	if len(tasks) != crashRounds || strings.Join(tasks, ",") != strings.Join(tasksBefore, ",") {
		t.Fatalf("%d task objects after the retries, want the %d the dead submitters wrote:\n%v\n%v", len(tasks), crashRounds, tasks, tasksBefore)
	}
}

func taskObjects(t *testing.T, srv *server, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return listKeys(ctx, srv.client(nil), srv.bucket, prefix+"tasks/")
}

// startCrashChild starts a copy of the test binary as a mode ("crash",
// "retry") child with cfg.
func startCrashChild(t *testing.T, mode string, cfg crashConfig) *testkit.Child {
	t.Helper()
	b, _ := json.Marshal(cfg)
	return testkit.StartChild(t, crashChildEnv+"="+mode, crashConfigEnv+"="+string(b))
}

// crashChildMain is a child of TestTaskQueueCrashBetweenTaskAndRecord. A
// "crash" child submits its key and stops after writing the task, to be
// killed; a "retry" child waits for "go", submits every key at once, and
// prints "KEY TASK_ID" for each.
func crashChildMain() int {
	mode := os.Getenv(crashChildEnv)
	var cfg crashConfig
	if err := json.Unmarshal([]byte(os.Getenv(crashConfigEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	srv := &server{endpoint: cfg.Endpoint, key: cfg.Key, secret: cfg.Secret, bucket: cfg.Bucket}
	q := &taskQueue{client: srv.client(nil), bucket: cfg.Bucket, prefix: cfg.Prefix, now: time.Now}
	var err error
	if q.store, err = s3store.New(q.client, s3store.Options{Bucket: cfg.Bucket, Prefix: cfg.Prefix}); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	// Retriers wait for the dead submitter's lease to pass, and those that
	// lose the takeover for the winner's outcome.
	q.eng = idem.New(q.store, idem.Policy{TTL: 30 * 24 * time.Hour, Lease: crashLease, CleanupInterval: -1, Wait: 30 * time.Second})
	ctx := context.Background()
	if mode == "crash" {
		q.afterTask = func() {
			fmt.Println("task-written")
			select {} // until SIGKILL
		}
		_, _, err := q.submit(ctx, "charge_customer", chargeInput, cfg.Keys[0], submitOpts{})
		fmt.Fprintln(os.Stderr, "crash child: the crashing submitter returned:", err)
		return 2
	}
	// A retrier comes back after the dead submitters' leases: it looked
	// at their records (a lookup starts its watch of each, S3 having no
	// clock for leases) a lease before it retries them all at once.
	for _, key := range cfg.Keys {
		if _, err := q.eng.Lookup(ctx, "charge_customer", key); err != nil {
			fmt.Fprintln(os.Stderr, "crash child: lookup:", err)
			return 2
		}
	}
	time.Sleep(crashLease)
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 2
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, key := range cfg.Keys {
		wg.Go(func() {
			id, _, err := q.submit(ctx, "charge_customer", chargeInput, key, submitOpts{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Printf("%s-error: %v\n", key, err)
				return
			}
			fmt.Println(key, id)
		})
	}
	wg.Wait()
	transport.CloseIdleConnections()
	return 0
}
