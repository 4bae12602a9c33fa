package temporal_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/goleak"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/trigger"
	tt "github.com/idem-dev/idem/trigger/temporal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const seedActivity = "550e8400-e29b-41d4-a716-446655440000"

// unique returns a name no earlier run against the same dev server used.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
}

func quiet() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func dial(t *testing.T) client.Client {
	t.Helper()
	addr := testenv.Temporal(t)
	c, err := client.Dial(client.Options{HostPort: addr, Logger: quiet()})
	if err != nil {
		testenv.Unavailable(t, "Temporal at %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// recorder is the activity every test workflow ends in: it counts what
// ran, per workflow ID.
type recorder struct {
	mu   sync.Mutex
	runs map[string][]trigger.Run // by activity ID
	ids  map[string]int           // executions per workflow ID
}

func newRecorder() *recorder {
	return &recorder{runs: map[string][]trigger.Run{}, ids: map[string]int{}}
}

func (r *recorder) Record(ctx context.Context, run trigger.Run) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids[activity.GetInfo(ctx).WorkflowExecution.ID]++
	if run.ActivityID != "" {
		r.runs[run.ActivityID] = append(r.runs[run.ActivityID], run)
	}
	return nil
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

func (r *recorder) runsOf(activityID string) []trigger.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := append([]trigger.Run(nil), r.runs[activityID]...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].ScheduledFor.Before(runs[j].ScheduledFor) })
	return runs
}

// RunActivityWorkflow is the seed's workflow: it records its run.
func RunActivityWorkflow(ctx workflow.Context, run trigger.Run) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 3 * time.Second})
	return workflow.ExecuteActivity(ctx, "Record", run).Get(ctx, nil)
}

// TaskWorkflow is a task instance.
func TaskWorkflow(ctx workflow.Context) error {
	return RunActivityWorkflow(ctx, trigger.Run{})
}

// SpawnTasksWorkflow spawns the activity runner's task instances of run runID.
func SpawnTasksWorkflow(ctx workflow.Context, runID string) (int, error) {
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{})
	spawned := 0
	for i, typ := range []string{"extract", "transform", "transform", "load"} {
		err := tt.ExecuteTask(ctx, runID, typ, i, TaskWorkflow).Get(ctx, nil)
		switch {
		case tt.IsAlreadyStarted(err):
		case err != nil:
			return spawned, err
		default:
			spawned++
		}
	}
	return spawned, nil
}

// startWorkers starts n worker replicas on queue, each with its own client
// connection, and returns a function that stops them all.
func startWorkers(t *testing.T, n int, queue string, rec *recorder) (stop func()) {
	t.Helper()
	var ws []worker.Worker
	for range n {
		c := dial(t)
		w := worker.New(c, queue, worker.Options{})
		w.RegisterWorkflowWithOptions(RunActivityWorkflow, workflow.RegisterOptions{Name: "RunActivityWorkflow"})
		w.RegisterWorkflow(TaskWorkflow)
		w.RegisterWorkflow(SpawnTasksWorkflow)
		w.RegisterActivityWithOptions(rec.Record, activity.RegisterOptions{Name: "Record"})
		tt.Register(w, c)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, w := range ws {
				w.Stop()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// The seed's two example IDs, character for character, as workflow IDs.
func TestWorkflowIDsVerbatim(t *testing.T) {
	c := dial(t)
	queue := unique("ids")
	rec := newRecorder()
	startWorkers(t, 1, queue, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &tt.Starter{Client: c, TaskQueue: queue}
	router := &tt.Router{Starter: s, Workflow: RunActivityWorkflow}
	// The dev server keeps workflows between test runs; a later run finds
	// them started, which is the point.
	if _, err := router.Route(ctx, seedActivity, "evt_abc123", trigger.Run{}); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if _, err := s.Start(ctx, trigger.SlotKey(seedActivity, slot), RunActivityWorkflow, trigger.Run{}); err != nil && !errors.Is(err, trigger.ErrAlreadyStarted) {
		t.Fatal(err)
	}
	for _, id := range []string{
		"activity-550e8400-e29b-41d4-a716-446655440000:evt_abc123",
		"activity-550e8400-e29b-41d4-a716-446655440000:2026-03-01T09:00:00+00:00",
	} {
		if _, err := c.DescribeWorkflow(ctx, id, ""); err != nil {
			t.Errorf("workflow %s: %v", id, err)
		}
		if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
			t.Errorf("workflow %s: %v", id, err)
		}
	}
	if _, err := router.Route(ctx, seedActivity, "", trigger.Run{}); !errors.Is(err, tt.ErrNoEventID) {
		t.Errorf("an event without an ID: %v", err)
	}
}

// A broker redelivers one event to ten routers at once, and again after
// it ran: one workflow starts, the others report already started, and the
// activity runs once.
func TestDuplicateStartRunsNothing(t *testing.T) {
	c := dial(t)
	queue := unique("dup")
	rec := newRecorder()
	startWorkers(t, 1, queue, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &tt.Starter{Client: c, TaskQueue: queue}
	activityID := unique("act")
	id := trigger.EventKey(activityID, "evt_abc123")
	var wg sync.WaitGroup
	var mu sync.Mutex
	started, already := 0, 0
	for range 10 {
		wg.Go(func() {
			_, err := s.Start(ctx, id, RunActivityWorkflow, trigger.Run{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				started++
			case errors.Is(err, trigger.ErrAlreadyStarted) && tt.IsAlreadyStarted(err):
				already++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if started != 1 || already != 9 {
		t.Fatalf("started %d, already started %d; want 1 and 9", started, already)
	}
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// After it completed: REJECT_DUPLICATE still refuses the ID.
	router := &tt.Router{Starter: s, Workflow: RunActivityWorkflow}
	if ok, err := router.Route(ctx, activityID, "evt_abc123", trigger.Run{}); ok || err != nil {
		t.Fatalf("redelivery after completion: started %v, %v", ok, err)
	}
	if n := rec.count(id); n != 1 {
		t.Fatalf("the activity ran %d times", n)
	}
}

// A run's task instances are child workflows with IDs
// task-{run_id}:{task_type}:{index}; the run spawned again (a re-run of
// the same run ID) spawns nothing twice.
func TestTaskInstancesOnce(t *testing.T) {
	c := dial(t)
	queue := unique("tasks")
	rec := newRecorder()
	startWorkers(t, 1, queue, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runID := unique("run")
	var spawned []int
	for i := range 2 {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-parent-%d", runID, i), TaskQueue: queue}, SpawnTasksWorkflow, runID)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := run.Get(ctx, &n); err != nil {
			t.Fatal(err)
		}
		spawned = append(spawned, n)
	}
	if spawned[0] != 4 || spawned[1] != 0 {
		t.Fatalf("spawned %v, want [4 0]", spawned)
	}
	for i, typ := range []string{"extract", "transform", "transform", "load"} {
		if id := trigger.TaskKey(runID, typ, i); rec.count(id) != 1 {
			t.Errorf("%s ran %d times", id, rec.count(id))
		}
	}
}

// A definition whose dedupe strategy is not its misfire policy never
// becomes a schedule.
func TestScheduleOptionsValidate(t *testing.T) {
	_, err := tt.ScheduleOptions("x", trigger.Schedule{ActivityID: "a", Cron: "@hourly", Misfire: trigger.MisfireCatchUp, DedupeStrategy: "compress"}, "RunActivityWorkflow", "q")
	if !errors.Is(err, trigger.ErrStrategyMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	o, err := tt.ScheduleOptions("x", trigger.Schedule{ActivityID: "a", Cron: "0 9 * * *", Location: kolkata, Misfire: trigger.MisfireSkip, DedupeStrategy: "skip"}, "RunActivityWorkflow", "q")
	if err != nil || o.Spec.TimeZoneName != "Asia/Kolkata" || o.Spec.CronExpressions[0] != "0 9 * * *" || o.CatchupWindow != time.Minute {
		t.Fatalf("%+v, %v", o.Spec, err)
	}
	o, err = tt.ScheduleOptions("x", trigger.Schedule{ActivityID: "a", Cron: "@every 15m"}, "RunActivityWorkflow", "q")
	if err != nil || len(o.Spec.Intervals) != 1 || o.Spec.Intervals[0].Every != 15*time.Minute {
		t.Fatalf("%+v, %v", o.Spec, err)
	}
}

func createSchedule(t *testing.T, c client.Client, s trigger.Schedule, queue string) {
	t.Helper()
	o, err := tt.ScheduleOptions(unique("sched"), s, "RunActivityWorkflow", queue)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.ScheduleClient().Create(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Delete(context.Background()) })
}

// A schedule every second, three worker replicas: each slot runs once,
// and none is skipped.
func TestScheduleEverySecondThreeWorkers(t *testing.T) {
	c := dial(t)
	queue := unique("every")
	rec := newRecorder()
	startWorkers(t, 3, queue, rec)
	activityID := unique("every")
	createSchedule(t, c, trigger.Schedule{ActivityID: activityID, Cron: "@every 1s", Misfire: trigger.MisfireCatchUp}, queue)
	time.Sleep(6 * time.Second)
	runs := rec.runsOf(activityID)
	if len(runs) < 4 {
		t.Fatalf("%d runs in 6 s", len(runs))
	}
	for i, run := range runs {
		if n := rec.count(run.Key); n != 1 {
			t.Errorf("%s ran %d times", run.Key, n)
		}
		if i > 0 && run.ScheduledFor.Sub(runs[i-1].ScheduledFor) != time.Second {
			t.Errorf("gap between %s and %s", runs[i-1].Key, run.Key)
		}
	}
	t.Logf("%d slots ran once each, %s .. %s", len(runs), runs[0].Key, runs[len(runs)-1].Key)
}

// Three schedules every second, one per misfire policy, on three worker
// replicas; all workers are down for 10 s. When they are back, skip runs
// the latest missed slot only, catchup runs each missed slot (at most 10),
// compress runs once with a window covering every missed slot. No slot
// runs twice.
func TestMisfireAfterWorkersDown(t *testing.T) {
	c := dial(t)
	queue := unique("misfire")
	rec := newRecorder()
	stop := startWorkers(t, 3, queue, rec)
	ids := map[trigger.Misfire]string{}
	for _, m := range []trigger.Misfire{trigger.MisfireSkip, trigger.MisfireCatchUp, trigger.MisfireCompress} {
		ids[m] = unique(m.String())
		createSchedule(t, c, trigger.Schedule{ActivityID: ids[m], Cron: "@every 1s", Misfire: m, DedupeStrategy: m.String()}, queue)
	}
	time.Sleep(3 * time.Second)
	stop()
	down := time.Now()
	time.Sleep(10 * time.Second)
	up := time.Now()
	startWorkers(t, 3, queue, rec)
	// Wait until every schedule runs its slots on time again: the missed
	// ones are planned and run by then.
	settled := up.Add(3 * time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n := 0
		for _, id := range ids {
			if runs := rec.runsOf(id); len(runs) > 0 && !runs[len(runs)-1].ScheduledFor.Before(settled) {
				n++
			}
		}
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			for m, id := range ids {
				t.Logf("%s: %d runs", m, len(rec.runsOf(id)))
			}
			t.Fatal("the schedules did not resume within 60 s of the workers' return")
		}
	}

	for m, id := range ids {
		runs := rec.runsOf(id)
		var missed []trigger.Run // runs of slots while the workers were down
		for _, run := range runs {
			if n := rec.count(run.Key); n != 1 {
				t.Errorf("%s: %s ran %d times", m, run.Key, n)
			}
			if run.ScheduledFor.After(down) && !run.ScheduledFor.After(up) {
				missed = append(missed, run)
			}
		}
		var desc []string
		for _, run := range missed {
			desc = append(desc, fmt.Sprintf("%s (%d slots from %s)", run.ScheduledFor.Format("15:04:05"), run.Slots, run.WindowStart.Format("15:04:05")))
		}
		t.Logf("%s: %d runs in all; slots while down (%s..%s): %v", m, len(runs), down.Format("15:04:05.0"), up.Format("15:04:05.0"), desc)
		switch m {
		case trigger.MisfireSkip:
			if len(missed) > 1 {
				t.Errorf("skip ran %d missed slots, want at most the latest", len(missed))
			}
			for _, run := range runs {
				if run.Slots != 1 {
					t.Errorf("skip run %s stands for %d slots", run.Key, run.Slots)
				}
			}
		case trigger.MisfireCatchUp:
			// The slot workflow plans when a worker first picks it up,
			// a second or two after they are back: the latest 10 slots
			// then include those one or two.
			if len(missed) < 7 || len(missed) > 10 {
				t.Errorf("catchup ran %d of the ~10 missed slots, want each of the latest 10", len(missed))
			}
		case trigger.MisfireCompress:
			// One run stands for the outage; every slot from the first to
			// the last is covered by exactly one window.
			var outage []trigger.Run
			covered := 0
			for i, run := range runs {
				if run.Slots >= 9 && !run.WindowStart.After(down.Add(time.Second)) && !run.WindowEnd.Before(up.Add(-time.Second)) {
					outage = append(outage, run)
				}
				covered += run.Slots
				if i > 0 && !run.WindowStart.After(runs[i-1].WindowEnd) {
					t.Errorf("compress: windows of %s and %s overlap", runs[i-1].Key, run.Key)
				}
			}
			if len(outage) != 1 {
				t.Errorf("compress: %d runs cover the outage, want one: %+v", len(outage), runs)
			}
			if span := int(runs[len(runs)-1].WindowEnd.Sub(runs[0].WindowStart)/time.Second) + 1; covered != span {
				t.Errorf("compress: windows cover %d slots of %d", covered, span)
			}
		}
	}
}

// The activity runner's catchup after a pause: a backfill of the last 30 s
// of a paused schedule every second runs the latest MaxCatchUp (10) slots
// once each, not 30.
func TestBackfillIsBounded(t *testing.T) {
	c := dial(t)
	queue := unique("backfill")
	rec := newRecorder()
	startWorkers(t, 2, queue, rec)
	activityID := unique("backfill")
	o, err := tt.ScheduleOptions(unique("sched"), trigger.Schedule{ActivityID: activityID, Cron: "@every 1s", Misfire: trigger.MisfireCatchUp}, "RunActivityWorkflow", queue)
	if err != nil {
		t.Fatal(err)
	}
	o.Paused = true
	ctx := context.Background()
	h, err := c.ScheduleClient().Create(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Delete(context.Background()) })
	now := time.Now()
	if err := tt.Backfill(ctx, h, now.Add(-30*time.Second), now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(rec.runsOf(activityID)) < 10 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // time for a run too many to show
	runs := rec.runsOf(activityID)
	backfilled := 0 // runs of slots in the backfilled span
	for i, run := range runs {
		if rec.count(run.Key) != 1 {
			t.Errorf("%s ran %d times", run.Key, rec.count(run.Key))
		}
		if !run.ScheduledFor.After(now) {
			backfilled++
		}
		if run.ScheduledFor.Before(now.Truncate(time.Second).Add(-9 * time.Second)) {
			t.Errorf("%s is older than the latest 10", run.Key)
		}
		if i > 0 && run.ScheduledFor.Sub(runs[i-1].ScheduledFor) != time.Second {
			t.Errorf("a gap before %s", run.Key)
		}
	}
	// The slot workflow plans the latest 10 slots as of when a worker
	// runs it, which on a loaded machine is a second or two after now:
	// then the latest of the backfilled span and the first that came due
	// after it make the 10, each once and in order (checked above), and no
	// older slot runs.
	if len(runs) < 10 || backfilled == 0 || backfilled > 10 {
		t.Errorf("a backfill of 30 slots ran %d of them and %d runs in all, want the latest 10 as of when it was planned", backfilled, len(runs))
	}
	t.Logf("backfill of 30 slots: %d of them ran, then %d that came due while they ran (%s..%s)",
		backfilled, len(runs)-backfilled, runs[0].ScheduledFor.Format("15:04:05"), runs[len(runs)-1].ScheduledFor.Format("15:04:05"))
}
