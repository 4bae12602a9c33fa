package trigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// Misfire says what a Runner does with slots it missed.
type Misfire int

const (
	// MisfireSkip discards missed slots and runs only the latest due one.
	MisfireSkip Misfire = iota
	// MisfireCatchUp runs the missed slots one by one, oldest first, at most
	// MaxCatchUp of them: the most recent ones. Older ones are discarded.
	MisfireCatchUp
	// MisfireCompress runs once for all missed slots: the run is keyed by
	// the latest slot and its Window covers every missed one.
	MisfireCompress
)

// ParseMisfire parses seed 002's dedupe_key_strategy / misfire_policy
// values: "skip", "catchup" or "compress".
func ParseMisfire(s string) (Misfire, error) {
	switch s {
	case "skip":
		return MisfireSkip, nil
	case "catchup", "catch_up":
		return MisfireCatchUp, nil
	case "compress":
		return MisfireCompress, nil
	}
	return 0, fmt.Errorf("trigger: misfire policy %q: want skip, catchup or compress", s)
}

// DefaultMaxCatchUp bounds MisfireCatchUp when Schedule.MaxCatchUp is 0.
const DefaultMaxCatchUp = 10

// Schedule is a cron-driven activity.
type Schedule struct {
	ActivityID string
	// Cron is a standard five-field crontab spec or a descriptor
	// ("@hourly", "@every 15m"), parsed by robfig/cron.
	Cron string
	// Location is the time zone of Cron; nil means UTC.
	Location   *time.Location
	Misfire    Misfire
	MaxCatchUp int
}

// Run is one run of a schedule.
type Run struct {
	ActivityID string
	// Key is SlotKey(ActivityID, ScheduledFor), the run's ID.
	Key          string
	ScheduledFor time.Time
	// Window is the span of slots the run stands for: [first, last]. For
	// MisfireCompress it covers every missed slot; otherwise both ends are
	// ScheduledFor.
	WindowStart, WindowEnd time.Time
	// Slots is how many slots the run stands for.
	Slots int
}

// Runner fires a Schedule through a Starter. Tick does one round; Run ticks
// at each slot until its context ends. Any number of Runners over one store
// run each slot once.
type Runner struct {
	Schedule Schedule
	Starter  *Starter
	// Job is what a run does.
	Job func(ctx context.Context, run Run) error
	// Since is when the runner starts counting slots: slots after it and up
	// to now are due. Set it to when the schedule was created or last known
	// to have run; the zero value means the first Tick's time, so nothing
	// before it is due.
	Since time.Time
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger

	once  sync.Once
	sched cron.Schedule
	err   error
	mu    sync.Mutex
	last  time.Time // guarded by mu: the latest slot considered
}

func (r *Runner) init() error {
	r.once.Do(func() {
		p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
		spec := r.Schedule.Cron
		loc := r.Schedule.Location
		if loc == nil {
			loc = time.UTC
		}
		s, err := p.Parse("CRON_TZ=" + loc.String() + " " + spec)
		if err != nil {
			r.err = fmt.Errorf("trigger: schedule %s: %w", r.Schedule.ActivityID, err)
			return
		}
		r.sched = s
		if r.Now == nil {
			r.Now = time.Now
		}
		if r.Logger == nil {
			r.Logger = slog.Default()
		}
		r.last = r.Since
	})
	return r.err
}

// maxScan bounds how many slots one Tick walks, so that a per-minute
// schedule with a Since years ago cannot stall the runner.
const maxScan = 1 << 20

// Due returns the runs due at now by the misfire policy, without starting
// them, and moves the runner's cursor to now.
func (r *Runner) Due(now time.Time) ([]Run, error) {
	if err := r.init(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.IsZero() {
		r.last = now
		return nil, nil
	}
	keep := 1
	if r.Schedule.Misfire == MisfireCatchUp {
		keep = r.Schedule.MaxCatchUp
		if keep <= 0 {
			keep = DefaultMaxCatchUp
		}
	}
	var (
		first  time.Time
		recent []time.Time // the latest `keep` slots, oldest first
		count  int
	)
	for t := r.sched.Next(r.last); !t.IsZero() && !t.After(now) && count < maxScan; t = r.sched.Next(t) {
		if count == 0 {
			first = t
		}
		count++
		if len(recent) == keep {
			copy(recent, recent[1:])
			recent = recent[:keep-1]
		}
		recent = append(recent, t)
	}
	if !now.Before(r.last) {
		r.last = now
	}
	if count == 0 {
		return nil, nil
	}
	id := r.Schedule.ActivityID
	var runs []Run
	switch r.Schedule.Misfire {
	case MisfireCompress:
		last := recent[len(recent)-1]
		runs = []Run{{ActivityID: id, Key: SlotKey(id, last), ScheduledFor: last, WindowStart: first, WindowEnd: last, Slots: count}}
	default:
		for _, t := range recent {
			runs = append(runs, Run{ActivityID: id, Key: SlotKey(id, t), ScheduledFor: t, WindowStart: t, WindowEnd: t, Slots: 1})
		}
	}
	if dropped := count - len(recent); dropped > 0 && r.Schedule.Misfire != MisfireCompress {
		r.Logger.Info("trigger: missed slots discarded", "activity", id, "discarded", dropped, "policy", r.Schedule.Misfire)
	}
	return runs, nil
}

// Tick starts the runs due now. It returns the runs this runner started;
// runs another replica started first are skipped silently.
func (r *Runner) Tick(ctx context.Context) ([]Run, error) {
	if err := r.init(); err != nil {
		return nil, err
	}
	runs, err := r.Due(r.Now())
	if err != nil {
		return nil, err
	}
	var started []Run
	var errs []error
	for _, run := range runs {
		err := r.Starter.Start(ctx, run.Key, func(ctx context.Context) error { return r.Job(ctx, run) })
		switch {
		case err == nil:
			started = append(started, run)
		case errors.Is(err, ErrAlreadyStarted):
		default:
			errs = append(errs, fmt.Errorf("trigger: %s: %w", run.Key, err))
		}
	}
	return started, errors.Join(errs...)
}

// Run ticks at every slot of the schedule until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.init(); err != nil {
		return err
	}
	for {
		if _, err := r.Tick(ctx); err != nil {
			r.Logger.Warn("trigger: tick failed", "activity", r.Schedule.ActivityID, "err", err)
		}
		now := r.Now()
		next := r.sched.Next(now)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (m Misfire) String() string {
	switch m {
	case MisfireSkip:
		return "skip"
	case MisfireCatchUp:
		return "catchup"
	case MisfireCompress:
		return "compress"
	}
	return fmt.Sprintf("Misfire(%d)", int(m))
}
