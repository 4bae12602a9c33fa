package trigger_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

// runnerBundle is what the runner tests share: one store, one clock that
// every engine and runner reads, and a count of runs per slot key.
type runnerBundle struct {
	store *flakyStore
	clock *testkit.Clock
	eng   *idem.Engine

	mu     sync.Mutex
	perKey map[string]int
	runs   []trigger.Run
}

func setupRunner(t *testing.T, start time.Time, p idem.Policy) *runnerBundle {
	t.Helper()
	clock := testkit.NewClockAt(start)
	b := &runnerBundle{store: &flakyStore{Store: memory.New(memory.WithClock(clock.Now))}, clock: clock, perKey: map[string]int{}}
	p.CleanupInterval = -1
	b.eng = idem.New(b.store, p, idem.WithClock(b.clock.Now))
	t.Cleanup(func() { b.eng.Close() })
	return b
}

// runner returns a replica of the schedule over the bundle's store, whose
// clock reads the shared time in loc (what time.Now gives a process whose
// TZ is loc).
func (b *runnerBundle) runner(s trigger.Schedule, loc *time.Location) *trigger.Runner {
	return &trigger.Runner{
		Schedule: s,
		Starter:  &trigger.Starter{Engine: b.eng, Scope: "schedules"},
		Job: func(ctx context.Context, run trigger.Run) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.perKey[run.Key]++
			b.runs = append(b.runs, run)
			return nil
		},
		Now: func() time.Time { return b.clock.Now().In(loc) },
	}
}

func (b *runnerBundle) advance(d time.Duration) {
	b.clock.Add(d)
}

func (b *runnerBundle) tickAll(rs ...*trigger.Runner) {
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { r.Tick(context.Background()) })
	}
	wg.Wait()
}

// onceEach fails t unless exactly the keys want ran, once each.
func (b *runnerBundle) onceEach(t *testing.T, want ...string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range want {
		if b.perKey[k] != 1 {
			t.Errorf("%s ran %d times, want once (all runs: %v)", k, b.perKey[k], b.perKey)
		}
	}
	if len(b.perKey) != len(want) {
		t.Errorf("%d slots ran, want %d: %v", len(b.perKey), len(want), b.perKey)
	}
}

// flakyStore is a store that can be taken down: while down, every call
// fails as an unreachable PostgreSQL would.
type flakyStore struct {
	store.Store
	down atomic.Bool
}

var errStoreDown = errors.New("connection refused")

func (s *flakyStore) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	if s.down.Load() {
		return store.Reservation{}, errStoreDown
	}
	return s.Store.Reserve(ctx, req)
}

func (s *flakyStore) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	if s.down.Load() {
		return store.Record{}, errStoreDown
	}
	return s.Store.Get(ctx, scope, keyHash)
}

func mustZone(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

var nineUTC = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// Two replicas of the payments API's reconciliation job share one store,
// one deployed with TZ=UTC and one with TZ=Asia/Kolkata. Each slot runs
// once, keyed in UTC as the activity runner's examples are.
func TestReplicasInDifferentTimeZones(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC.Add(-time.Minute), idem.Policy{})
	s := trigger.Schedule{ActivityID: activity, Cron: "*/15 * * * *", Misfire: trigger.MisfireCatchUp}
	utc, india := b.runner(s, time.UTC), b.runner(s, mustZone(t, "Asia/Kolkata"))
	b.tickAll(utc, india)
	var want []string
	for i := range 5 {
		b.advance(15 * time.Minute)
		b.tickAll(utc, india)
		want = append(want, trigger.SlotKey(activity, nineUTC.Add(time.Duration(i)*15*time.Minute)))
	}
	b.onceEach(t, want...)
	if want[0] != "activity-"+activity+":2026-03-01T09:00:00+00:00" {
		t.Fatalf("first slot key %s", want[0])
	}
	for _, run := range b.runs {
		if run.ScheduledFor.Location() != time.UTC {
			t.Errorf("run %s: ScheduledFor in %v, want UTC", run.Key, run.ScheduledFor.Location())
		}
	}
}

// A schedule in a named zone fires at its local wall time; the key is the
// same instant in UTC. 09:00 in Kolkata is 03:30 UTC.
func TestScheduleLocation(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC), idem.Policy{})
	s := trigger.Schedule{ActivityID: "standup", Cron: "0 9 * * *", Location: mustZone(t, "Asia/Kolkata")}
	r := b.runner(s, mustZone(t, "America/New_York"))
	r.Tick(context.Background())
	b.advance(time.Hour)
	r.Tick(context.Background())
	b.onceEach(t, "activity-standup:2026-03-01T03:30:00+00:00")
}

// Two replicas of "@every 2s" started a second apart run on the same
// slots, anchored to a fixed epoch, not to each replica's start.
func TestEveryIsAnchored(t *testing.T) {
	t.Parallel()
	start := nineUTC.Add(300 * time.Millisecond)
	b := setupRunner(t, start, idem.Policy{})
	s := trigger.Schedule{ActivityID: activity, Cron: "@every 2s", Misfire: trigger.MisfireCatchUp}
	first, second := b.runner(s, time.UTC), b.runner(s, time.UTC)
	first.Tick(context.Background())
	var all []*trigger.Runner
	all = append(all, first)
	for step := 1; step <= 90; step++ { // 9 s in steps of 100 ms
		b.advance(100 * time.Millisecond)
		if step == 10 {
			all = append(all, second) // started a second later
		}
		b.tickAll(all...)
	}
	// Slots in (09:00:00.3, 09:00:09.3]: :02, :04, :06, :08.
	var want []string
	for _, sec := range []int{2, 4, 6, 8} {
		want = append(want, trigger.SlotKey(activity, nineUTC.Add(time.Duration(sec)*time.Second)))
	}
	b.onceEach(t, want...)
}

// An hourly catch-up runner whose store is down from 10:00 to 12:59 runs
// 10:00, 11:00 and 12:00 once the store is back, then 13:00.
func TestStoreOutageCatchUp(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{})
	r := b.runner(trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp}, time.UTC)
	r.Tick(context.Background())
	b.store.down.Store(true)
	for range 3 { // 10:00, 11:00, 12:00
		b.advance(time.Hour)
		if started, err := r.Tick(context.Background()); err == nil || len(started) != 0 {
			t.Fatalf("tick with the store down: started %v, err %v", started, err)
		}
	}
	b.store.down.Store(false)
	b.advance(time.Hour) // 13:30
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for h := 10; h <= 13; h++ {
		want = append(want, trigger.SlotKey(activity, time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC)))
	}
	b.onceEach(t, want...)
}

// The store outage under compress: one run, whose window covers the slots
// the outage hid.
func TestStoreOutageCompress(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{})
	r := b.runner(trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCompress}, time.UTC)
	r.Tick(context.Background())
	b.store.down.Store(true)
	for range 3 {
		b.advance(time.Hour)
		r.Tick(context.Background())
	}
	b.store.down.Store(false)
	b.advance(time.Hour)
	r.Tick(context.Background())
	b.onceEach(t, trigger.SlotKey(activity, time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)))
	if run := b.runs[0]; run.Slots != 4 || run.WindowStart.Hour() != 10 || run.WindowEnd.Hour() != 13 {
		t.Fatalf("compressed run %+v, want 4 slots 10:00..13:00", run)
	}
}

// Every replica restarts at 13:30 after running 10:00; none was told when
// it last ran. The catch-up runner finds 11:00 to 13:00 in the store.
func TestRestartWithoutSince(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		misfire trigger.Misfire
		want    []int // hours run after the restart
		slots   int   // slots the last run stands for
	}{
		{trigger.MisfireCatchUp, []int{11, 12, 13}, 1},
		{trigger.MisfireCompress, []int{13}, 3},
		{trigger.MisfireSkip, []int{13}, 1},
	} {
		t.Run(c.misfire.String(), func(t *testing.T) {
			b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{})
			s := trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: c.misfire}
			before := b.runner(s, time.UTC)
			before.Tick(context.Background())
			b.advance(time.Hour) // 10:30
			before.Tick(context.Background())

			b.advance(3 * time.Hour) // 13:30: a new process, a new runner
			after := b.runner(s, mustZone(t, "Europe/Berlin"))
			if _, err := after.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := []string{trigger.SlotKey(activity, nineUTC.Add(time.Hour))}
			for _, h := range c.want {
				want = append(want, trigger.SlotKey(activity, time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC)))
			}
			b.onceEach(t, want...)
			if last := b.runs[len(b.runs)-1]; last.Slots != c.slots {
				t.Fatalf("last run %+v stands for %d slots, want %d", last, last.Slots, c.slots)
			}
			// And a brand-new schedule has nothing due at its first tick.
			fresh := b.runner(trigger.Schedule{ActivityID: "new-" + activity, Cron: "@hourly", Misfire: c.misfire}, time.UTC)
			if started, err := fresh.Tick(context.Background()); err != nil || len(started) != 0 {
				t.Fatalf("a new schedule started %v, %v", started, err)
			}
		})
	}
}

// A replica killed with SIGKILL while running the 10:00 slot leaves an
// in_progress record whose lease nobody renews. Another replica runs the
// slot again once the lease is over, and nothing else twice.
func TestSlotOfDeadReplicaRerunsAfterLease(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{Lease: lease})
	s := trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp}
	survivor := b.runner(s, time.UTC)
	survivor.Tick(context.Background())

	// 10:00: the dead replica's reservation, exactly as it left it.
	b.advance(30 * time.Minute)
	slot := trigger.SlotKey(activity, nineUTC.Add(time.Hour))
	res, err := b.store.Reserve(context.Background(), store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("schedules", slot), Scope: "schedules", Key: slot,
			State: store.InProgress, Token: 42,
		},
		Lease: lease, TTL: idem.DefaultTTL,
	})
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	b.advance(time.Second)
	if started, _ := survivor.Tick(context.Background()); len(started) != 0 {
		t.Fatalf("started %v while the dead replica's lease runs", started)
	}
	b.advance(lease)
	if _, err := survivor.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.onceEach(t, slot)
	b.advance(time.Hour)
	survivor.Tick(context.Background())
	b.onceEach(t, slot, trigger.SlotKey(activity, nineUTC.Add(2*time.Hour)))
}

// The activity runner keeps dedupe_key_strategy and misfire_policy in two fields and
// requires them to agree; a definition where they differ is refused before
// anything runs.
func TestStrategyMustMatchMisfire(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC, idem.Policy{})
	for _, c := range []struct {
		strategy string
		misfire  trigger.Misfire
		ok       bool
	}{
		{"", trigger.MisfireCompress, true},
		{"skip", trigger.MisfireSkip, true},
		{"catchup", trigger.MisfireCatchUp, true},
		{"compress", trigger.MisfireCompress, true},
		{"compress", trigger.MisfireCatchUp, false},
		{"skip", trigger.MisfireCompress, false},
		{"catchup", trigger.MisfireSkip, false},
	} {
		s := trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: c.misfire, DedupeStrategy: c.strategy}
		err := s.Validate()
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, trigger.ErrStrategyMismatch)) {
			t.Errorf("%q with %v: %v", c.strategy, c.misfire, err)
		}
		if err := trigger.CheckStrategy(c.strategy, c.misfire); (err == nil) != c.ok {
			t.Errorf("CheckStrategy(%q, %v) = %v", c.strategy, c.misfire, err)
		}
		r := b.runner(s, time.UTC)
		if _, err := r.Tick(context.Background()); (err == nil) != c.ok {
			t.Errorf("Tick with %q / %v: %v", c.strategy, c.misfire, err)
		}
	}
	if err := trigger.CheckStrategy("hourly", trigger.MisfireSkip); !errors.Is(err, trigger.ErrInvalidSchedule) {
		t.Errorf("unknown strategy: %v", err)
	}
	b.onceEach(t)
}

func TestInvalidSchedules(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]trigger.Schedule{
		"no activity":   {Cron: "@hourly"},
		"bad cron":      {ActivityID: "a", Cron: "61 * * * *"},
		"local zone":    {ActivityID: "a", Cron: "@hourly", Location: time.Local},
		"misfire":       {ActivityID: "a", Cron: "@hourly", Misfire: 7},
		"negative max":  {ActivityID: "a", Cron: "@hourly", MaxCatchUp: -1},
		"six fields":    {ActivityID: "a", Cron: "0 0 * * * *"},
		"unknown words": {ActivityID: "a", Cron: "@fortnightly"},
	} {
		if err := s.Validate(); !errors.Is(err, trigger.ErrInvalidSchedule) {
			t.Errorf("%s: %v, want ErrInvalidSchedule", name, err)
		}
	}
	if d := (trigger.Schedule{ActivityID: "a", Cron: "@every 15m"}).Interval(); d != 15*time.Minute {
		t.Errorf("Interval = %v", d)
	}
}

// A job that fails under OnFailureRelease did not happen: its slot is
// planned again at the next tick, not passed over.
func TestFailedJobIsRetried(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{})
	r := b.runner(trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp}, time.UTC)
	job := r.Job
	fail := true
	r.Job = func(ctx context.Context, run trigger.Run) error {
		if fail {
			return errors.New("upstream 503")
		}
		return job(ctx, run)
	}
	r.Tick(context.Background())
	b.advance(time.Hour)
	if _, err := r.Tick(context.Background()); err == nil {
		t.Fatal("failed job reported no error")
	}
	fail = false
	b.advance(time.Minute)
	r.Tick(context.Background())
	b.onceEach(t, trigger.SlotKey(activity, nineUTC.Add(time.Hour)))
}

// Run on the real clock: two replicas of "@every 1s", started half a
// second apart, run each slot once, with no gap.
func TestRunReplicas(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	var mu sync.Mutex
	perKey := map[string]int{}
	var slots []time.Time
	newRunner := func() *trigger.Runner {
		return &trigger.Runner{
			Schedule: trigger.Schedule{ActivityID: activity, Cron: "@every 1s", Misfire: trigger.MisfireCatchUp},
			Starter:  &trigger.Starter{Engine: eng, Scope: "schedules"},
			Job: func(ctx context.Context, run trigger.Run) error {
				mu.Lock()
				defer mu.Unlock()
				if perKey[run.Key]++; perKey[run.Key] == 1 {
					slots = append(slots, run.ScheduledFor)
				}
				return nil
			},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { newRunner().Run(ctx) })
	time.Sleep(500 * time.Millisecond)
	wg.Go(func() { newRunner().Run(ctx) })
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(slots) < 2 {
		t.Fatalf("%d slots ran in 3.5 s", len(slots))
	}
	for i, s := range slots {
		if n := perKey[trigger.SlotKey(activity, s)]; n != 1 {
			t.Errorf("%v ran %d times", s, n)
		}
		if s.Nanosecond() != 0 || (i > 0 && s.Sub(slots[i-1]) != time.Second) {
			t.Errorf("slot %v after %v", s, slots[max(i-1, 0)])
		}
	}
}

// A start that finds the ID held says so, with the holder's lease: what a
// broker consumer needs to decide between ack and redelivery.
func TestAlreadyStartedSaysRunning(t *testing.T) {
	t.Parallel()
	s := newStarter(t, idem.Policy{Lease: time.Minute})
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Start(context.Background(), "evt", func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	var already *trigger.AlreadyStartedError
	err := s.Start(context.Background(), "evt", func(context.Context) error { return nil })
	if !errors.As(err, &already) || !already.Running || time.Until(already.LeaseUntil) < 50*time.Second || !errors.Is(err, trigger.ErrAlreadyStarted) {
		t.Fatalf("while running: %v (%+v)", err, already)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background(), "evt", func(context.Context) error { return nil })
	if !errors.As(err, &already) || already.Running {
		t.Fatalf("after it finished: %v (%+v)", err, already)
	}
}

// A replica died in the 11:00 slot of a long job (a 90-minute lease); a
// survivor ran 12:00 and then every replica restarted at 12:31. The
// restarted runner finds 11:00 still in progress behind the settled 12:00
// and runs it, its lease over.
func TestRestartFindsDeadSlotBehindSettledOne(t *testing.T) {
	t.Parallel()
	const lease = 90 * time.Minute
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{Lease: lease})
	s := trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp}
	before := b.runner(s, time.UTC)
	before.Tick(context.Background())
	b.advance(30 * time.Minute) // 10:00
	before.Tick(context.Background())
	b.advance(time.Hour) // 11:00: the dead replica's reservation
	slot := trigger.SlotKey(activity, nineUTC.Add(2*time.Hour))
	if _, err := b.store.Reserve(context.Background(), store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("schedules", slot), Scope: "schedules", Key: slot,
			State: store.InProgress, Token: 42,
		},
		Lease: lease, TTL: idem.DefaultTTL,
	}); err != nil {
		t.Fatal(err)
	}
	b.advance(time.Hour) // 12:00
	b.tickAll(b.runner(s, time.UTC))
	b.advance(31 * time.Minute) // 12:31, a restart
	if _, err := b.runner(s, time.UTC).Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.onceEach(t, trigger.SlotKey(activity, nineUTC.Add(time.Hour)), slot, trigger.SlotKey(activity, nineUTC.Add(3*time.Hour)))
}

// Catch-up after a restart runs a slot whose job failed (and was released)
// even though a later slot ran on another replica before the restart.
func TestRestartRetriesFailedSlotBehindSettledOne(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, nineUTC.Add(30*time.Minute), idem.Policy{})
	s := trigger.Schedule{ActivityID: activity, Cron: "@hourly", Misfire: trigger.MisfireCatchUp}
	failing := b.runner(s, time.UTC)
	failing.Job = func(context.Context, trigger.Run) error { return errors.New("upstream 503") }
	failing.Tick(context.Background())
	b.advance(time.Hour) // 10:30: 10:00 fails
	if _, err := failing.Tick(context.Background()); err == nil {
		t.Fatal("no error from a failed job")
	}
	b.advance(time.Hour) // 11:30: another replica, started now, runs 11:00 only
	other := b.runner(s, time.UTC)
	other.Since = b.clock.Now().Add(-45 * time.Minute)
	other.Tick(context.Background())
	b.advance(time.Hour) // 12:30: every replica restarts
	if _, err := b.runner(s, time.UTC).Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.onceEach(t, trigger.SlotKey(activity, nineUTC.Add(time.Hour)), trigger.SlotKey(activity, nineUTC.Add(2*time.Hour)), trigger.SlotKey(activity, nineUTC.Add(3*time.Hour)))
}
