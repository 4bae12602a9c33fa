package trigger_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/trigger"
)

const envRunnerActivity = "IDEM_RUNNER_ACTIVITY"

// runnerProcess is one replica of a service running "@every 1s" with the
// embedded runner over the shared PostgreSQL store; its job is killtest's
// effect, announced before it is written.
func runnerProcess(ctx context.Context, h *killtest.Harness) int {
	r := &trigger.Runner{
		Schedule: trigger.Schedule{ActivityID: os.Getenv(envRunnerActivity), Cron: "@every 1s", Misfire: trigger.MisfireCatchUp},
		Starter:  h.Starter,
		Job:      func(ctx context.Context, run trigger.Run) error { return h.Effect(ctx, run.Key) },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	r.Run(ctx)
	return 0
}

// replica is a runner process as the test sees it.
type replica struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// Replicas of one schedule as separate OS processes over one PostgreSQL
// store, with real clocks: two deployed with TZ=UTC and TZ=Asia/Kolkata,
// a third (TZ=America/New_York) started 1.5 s later; one is killed with
// SIGKILL in the middle of a slot; then every replica stops, nothing runs
// for 3 s, and two new ones (no Since) start in other zones. Every slot
// from the first to the last runs exactly once: the killed one after its
// lease, the missed ones by catch-up.
func TestProcessReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 12 s run of real processes")
	}
	db := killtest.Setup(t)
	activityID := fmt.Sprintf("proc-%d", time.Now().UnixNano())
	var (
		mu       sync.Mutex
		killed   string // the slot whose replica was killed in it
		killFrom = time.Now().Add(time.Second)
		n        int
		wg       sync.WaitGroup
	)
	start := func(tz string) *replica {
		n++
		cmd := db.Command(n, "TZ="+tz, envRunnerActivity+"="+activityID)
		stdin, stdout := testkit.StartPiped(t, cmd)
		r := &replica{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		wg.Go(func() {
			defer close(r.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				_, key, _ := strings.Cut(sc.Text(), " ")
				mu.Lock()
				kill := killed == "" && time.Now().After(killFrom)
				if kill {
					killed = key
				}
				mu.Unlock()
				if kill {
					cmd.Process.Signal(syscall.SIGKILL)
					break
				}
				fmt.Fprintln(stdin, "go")
			}
			io.Copy(io.Discard, stdout)
			cmd.Wait()
		})
		t.Cleanup(func() { cmd.Process.Kill(); <-r.done })
		return r
	}
	stop := func(rs ...*replica) {
		for _, r := range rs {
			r.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, r := range rs {
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("replica %d did not stop", r.cmd.Process.Pid)
			}
		}
	}

	a, b := start("UTC"), start("Asia/Kolkata")
	time.Sleep(1500 * time.Millisecond)
	c := start("America/New_York")
	time.Sleep(4 * time.Second) // the killed slot's lease (3 s) runs out meanwhile
	stop(a, b, c)
	down := time.Now()
	time.Sleep(3 * time.Second)
	up := time.Now()
	d, e := start("Europe/Berlin"), start("Asia/Kolkata")
	time.Sleep(3 * time.Second)
	stop(d, e)
	wg.Wait()

	rows, err := db.Pool.Query(context.Background(), "SELECT event_id, count(*) FROM "+db.Effects+" GROUP BY 1 ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var slots []time.Time
	for rows.Next() {
		var key string
		var runs int
		if err := rows.Scan(&key, &runs); err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse("2006-01-02T15:04:05-07:00", strings.TrimPrefix(key, "activity-"+activityID+":"))
		if err != nil || !strings.HasSuffix(key, "+00:00") {
			t.Fatalf("slot key %s is not keyed in UTC: %v", key, err)
		}
		if runs != 1 {
			t.Errorf("%s ran %d times", key, runs)
		}
		slots = append(slots, at)
	}
	if len(slots) < 8 {
		t.Fatalf("%d slots ran", len(slots))
	}
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap != time.Second {
			t.Errorf("no run between %v and %v", slots[i-1], slots[i])
		}
	}
	if t.Failed() {
		recs, err := db.Pool.Query(context.Background(), "SELECT key, state, created_at, updated_at, lease_until FROM "+db.Records+" ORDER BY key")
		if err != nil {
			t.Fatal(err)
		}
		defer recs.Close()
		for recs.Next() {
			var key, state string
			var created, updated, lease time.Time
			recs.Scan(&key, &state, &created, &updated, &lease)
			t.Logf("record %s %s created %s updated %s lease %s", key, state, created.Format("15:04:05.000"), updated.Format("15:04:05.000"), lease.Format("15:04:05.000"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if killed == "" {
		t.Fatal("no replica was killed")
	}
	t.Logf("%d slots %s..%s each ran once; killed in %s; all replicas down %s..%s",
		len(slots), slots[0].Format("15:04:05"), slots[len(slots)-1].Format("15:04:05"), killed, down.Format("15:04:05.0"), up.Format("15:04:05.0"))
}
