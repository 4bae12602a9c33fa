package trigger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

func TestMain(m *testing.M) {
	if h, ctx := killtest.Child(); h != nil {
		os.Exit(runnerProcess(ctx, h))
	}
	testkit.VerifyTestMain(m)
}

const activity = "550e8400-e29b-41d4-a716-446655440000"

// The seed's two examples, character for character.
func TestKeys(t *testing.T) {
	t.Parallel()
	slot := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if got, want := trigger.SlotKey(activity, slot), "activity-550e8400-e29b-41d4-a716-446655440000:2026-03-01T09:00:00+00:00"; got != want {
		t.Errorf("SlotKey = %s, want %s", got, want)
	}
	if got, want := trigger.EventKey(activity, "evt_abc123"), "activity-550e8400-e29b-41d4-a716-446655440000:evt_abc123"; got != want {
		t.Errorf("EventKey = %s, want %s", got, want)
	}
	if got, want := trigger.TaskKey("run-1", "extract", 3), "task-run-1:extract:3"; got != want {
		t.Errorf("TaskKey = %s, want %s", got, want)
	}
	// Other zones and sub-second slots, as Python's isoformat() writes them.
	berlin := time.FixedZone("CET", 3600)
	if got := trigger.SlotKey("a", time.Date(2026, 3, 1, 10, 0, 0, 500000000, berlin)); got != "activity-a:2026-03-01T10:00:00.500000+01:00" {
		t.Errorf("SlotKey = %s", got)
	}
}

func newStarter(t *testing.T, p idem.Policy) *trigger.Starter {
	p.CleanupInterval = -1
	eng := idem.New(memory.New(), p)
	t.Cleanup(func() { eng.Close() })
	return &trigger.Starter{Engine: eng, Scope: "activities"}
}

// Event deduplication: a redelivered event starts nothing.
func TestEventRedelivery(t *testing.T) {
	t.Parallel()
	s := newStarter(t, idem.Policy{})
	var runs atomic.Int32
	start := func() error {
		return s.Start(context.Background(), trigger.EventKey(activity, "evt_abc123"), func(ctx context.Context) error {
			runs.Add(1)
			return nil
		})
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	if err := start(); !errors.Is(err, trigger.ErrAlreadyStarted) {
		t.Fatalf("redelivery: %v, want ErrAlreadyStarted", err)
	}
	// A broker that redelivers to 50 consumers at once.
	var wg sync.WaitGroup
	var already atomic.Int32
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Start(context.Background(), trigger.EventKey(activity, "evt_race"), func(ctx context.Context) error {
				runs.Add(1)
				time.Sleep(10 * time.Millisecond)
				return nil
			})
			if errors.Is(err, trigger.ErrAlreadyStarted) {
				already.Add(1)
			} else if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 2 || already.Load() != 49 {
		t.Fatalf("runs %d, already started %d; want 2 and 49", runs.Load(), already.Load())
	}
}

func TestFailedStartMayBeRetried(t *testing.T) {
	t.Parallel()
	s := newStarter(t, idem.Policy{})
	boom := errors.New("broker unavailable")
	if err := s.Start(context.Background(), "e1", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), "e1", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("retry after a failed start: %v", err)
	}
	// Under REJECT_DUPLICATE semantics a failed start counts too.
	strict := newStarter(t, idem.Policy{OnFailure: idem.OnFailureConflict})
	strict.Start(context.Background(), "e1", func(context.Context) error { return boom })
	if err := strict.Start(context.Background(), "e1", func(context.Context) error { return nil }); !errors.Is(err, trigger.ErrAlreadyStarted) {
		t.Fatalf("strict retry: %v", err)
	}
}

// Task instance idempotency: a run replayed after a worker restart spawns
// its tasks again with the same IDs, and nothing twice; log_run's upsert on
// run_id likewise.
func TestChildTasksAndRunLog(t *testing.T) {
	t.Parallel()
	s := newStarter(t, idem.Policy{})
	spawned := map[string]int{}
	runWorkflow := func(runID string) {
		for i, typ := range []string{"extract", "transform", "transform", "load"} {
			id := trigger.TaskKey(runID, typ, i)
			s.Start(context.Background(), id, func(context.Context) error { spawned[id]++; return nil })
		}
		s.Start(context.Background(), "log_run:"+runID, func(context.Context) error { spawned["log "+runID]++; return nil })
	}
	runWorkflow("run-1")
	runWorkflow("run-1") // Temporal replays the workflow
	if len(spawned) != 5 {
		t.Fatalf("spawned %v", spawned)
	}
	for id, n := range spawned {
		if n != 1 {
			t.Fatalf("%s spawned %d times", id, n)
		}
	}
}

func TestMisfirePolicies(t *testing.T) {
	t.Parallel()
	lastRun := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	// The worker was down from 09:00 to 14:30: 10:00 to 14:00 were missed.
	now := time.Date(2026, 3, 1, 14, 30, 0, 0, time.UTC)
	cases := []struct {
		name    string
		misfire trigger.Misfire
		max     int
		want    []string // slot hours run
		window  [2]int
		slots   int
	}{
		{"skip", trigger.MisfireSkip, 0, []string{"14"}, [2]int{14, 14}, 1},
		{"catchup", trigger.MisfireCatchUp, 0, []string{"10", "11", "12", "13", "14"}, [2]int{14, 14}, 1},
		{"catchup max 3", trigger.MisfireCatchUp, 3, []string{"12", "13", "14"}, [2]int{14, 14}, 1},
		{"compress", trigger.MisfireCompress, 0, []string{"14"}, [2]int{10, 14}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStarter(t, idem.Policy{})
			var got []trigger.Run
			r := &trigger.Runner{
				Schedule: trigger.Schedule{ActivityID: activity, Cron: "0 * * * *", Misfire: c.misfire, MaxCatchUp: c.max},
				Starter:  s,
				Job:      func(ctx context.Context, run trigger.Run) error { got = append(got, run); return nil },
				Since:    lastRun,
				Now:      testkit.NewClockAt(now).Now,
			}
			if _, err := r.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			var hours []string
			for _, run := range got {
				hours = append(hours, fmt.Sprint(run.ScheduledFor.Hour()))
				if run.Key != trigger.SlotKey(activity, run.ScheduledFor) {
					t.Fatalf("key %s", run.Key)
				}
			}
			if fmt.Sprint(hours) != fmt.Sprint(c.want) {
				t.Fatalf("ran slots %v, want %v", hours, c.want)
			}
			last := got[len(got)-1]
			if last.WindowStart.Hour() != c.window[0] || last.WindowEnd.Hour() != c.window[1] || last.Slots != c.slots {
				t.Fatalf("window %v..%v (%d slots)", last.WindowStart, last.WindowEnd, last.Slots)
			}
			// Ticking again at the same time runs nothing.
			if again, _ := r.Tick(context.Background()); len(again) != 0 {
				t.Fatalf("second tick ran %v", again)
			}
		})
	}
	// Catch-up is bounded by the default of 10, keeping the latest slots.
	s := newStarter(t, idem.Policy{})
	n := 0
	r := &trigger.Runner{
		Schedule: trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp},
		Starter:  s, Job: func(context.Context, trigger.Run) error { n++; return nil },
		Since: lastRun, Now: testkit.NewClockAt(lastRun.Add(30 * time.Hour)).Now,
	}
	runs, err := r.Tick(context.Background())
	if err != nil || n != 10 || runs[0].ScheduledFor != lastRun.Add(21*time.Hour) {
		t.Fatalf("%d runs, first %v, %v", n, runs[0].ScheduledFor, err)
	}
}

// Replicas running the same schedule over one store run each slot once,
// whatever their policy sees.
func TestReplicasRunEachSlotOnce(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	var mu sync.Mutex
	perSlot := map[string]int{}
	clock := testkit.NewClock()
	var runners []*trigger.Runner
	for range 6 {
		runners = append(runners, &trigger.Runner{
			Schedule: trigger.Schedule{ActivityID: activity, Cron: "*/15 * * * *", Misfire: trigger.MisfireCatchUp},
			Starter:  &trigger.Starter{Engine: eng, Scope: "schedules"},
			Job: func(ctx context.Context, run trigger.Run) error {
				mu.Lock()
				perSlot[run.Key]++
				mu.Unlock()
				return nil
			},
			Since: clock.Now(),
			Now:   clock.Now,
		})
	}
	for step := range 8 { // two hours in 15-minute steps, with jitter
		clock.Add(15*time.Minute + time.Duration(step)*time.Second)
		var wg sync.WaitGroup
		for _, r := range runners {
			wg.Add(1)
			go func() { defer wg.Done(); r.Tick(context.Background()) }()
		}
		wg.Wait()
	}
	if len(perSlot) != 8 {
		t.Fatalf("%d slots ran, want 8: %v", len(perSlot), perSlot)
	}
	for k, n := range perSlot {
		if n != 1 {
			t.Fatalf("%s ran %d times", k, n)
		}
	}
}

func TestBadSchedule(t *testing.T) {
	t.Parallel()
	r := &trigger.Runner{Schedule: trigger.Schedule{ActivityID: "a", Cron: "61 * * * *"}, Starter: newStarter(t, idem.Policy{})}
	if _, err := r.Tick(context.Background()); err == nil {
		t.Fatal("invalid cron accepted")
	}
	for _, s := range []string{"skip", "catchup", "compress"} {
		if m, err := trigger.ParseMisfire(s); err != nil || m.String() != s {
			t.Errorf("%s: %v %v", s, m, err)
		}
	}
}
