package trigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// Runner fires a Schedule through a Starter. Tick does one round; Run ticks
// at each slot until its context ends. Any number of Runners over one store
// run each slot once, wherever and whenever they were started.
//
// What a Runner knows lives in the store, not in the process: each slot's
// record says whether it was started, and a first record per schedule says
// when the schedule began. A runner that starts (a restart, a new replica)
// reads the slot records back and plans by the misfire policy: catch-up
// runs each of its latest MaxCatchUp slots that is not recorded, skip and
// compress start after the latest recorded one. It never needs to be told
// when it last ran. Its
// cursor moves past a slot only once the slot's start is recorded, so a
// store outage delays slots instead of losing them. A slot another replica
// holds is checked again at later ticks (and when that holder's lease runs
// out, Run wakes up for it): if the holder died, the slot runs again after
// its lease, under the engine's default OnStaleRetry.
//
// A runner sees back only as far as the engine's TTL (older slot records
// are gone), so keep the TTL longer than the longest outage to be caught
// up: the default, 24 h, suits hourly schedules. The store needs no other
// state: a schedule's origin is one record (retained ten years) written by
// its first runner.
type Runner struct {
	Schedule Schedule
	Starter  *Starter
	// Job is what a run does.
	Job func(ctx context.Context, run Run) error
	// Since, when set, is when the runner starts counting slots: slots after
	// it and up to now are due unless the store shows them settled. The
	// zero value means when the schedule first ran over this store (the
	// first Tick of its first runner), which the store remembers.
	Since time.Time
	// Now is the clock; nil means time.Now. Its location does not matter.
	Now    func() time.Time
	Logger *slog.Logger

	once  sync.Once
	sched cron.Schedule
	err   error

	mu sync.Mutex // held by Tick, for the fields below
	// cursor: every slot up to it is settled, handed to pending, or
	// discarded by the misfire policy. Zero until read back from the store.
	cursor time.Time
	// first is the time of this runner's first Tick: the schedule's origin
	// if the store has none yet.
	first time.Time
	// pending are started runs that another holder has in progress.
	pending map[string]pendingRun
}

type pendingRun struct {
	run        Run
	leaseUntil time.Time
}

// originTTL is how long the store remembers when a schedule began.
const originTTL = 10 * 365 * 24 * time.Hour

// maxLookback bounds the slot records a restarting compress runner reads
// back looking for its last run.
const maxLookback = 10000

// deadLookback is how many slots older than those the policy could run a
// restarting runner reads back for runs left in progress by a replica that
// died: they are retried after their lease, whatever came since.
const deadLookback = 16

func (r *Runner) init() error {
	r.once.Do(func() {
		r.sched, r.err = r.Schedule.compile()
		if r.Now == nil {
			r.Now = time.Now
		}
		if r.Logger == nil {
			r.Logger = slog.Default()
		}
		r.pending = map[string]pendingRun{}
	})
	return r.err
}

// Tick starts the runs due now: slots missed since the last settled one,
// as the misfire policy says, and runs another holder had in progress whose
// lease has run out. It returns the runs this runner started; runs another
// replica started first are skipped silently.
func (r *Runner) Tick(ctx context.Context) ([]Run, error) {
	if err := r.init(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now().UTC()
	if r.first.IsZero() {
		r.first = now
	}
	if r.cursor.IsZero() {
		if err := r.recover(ctx, now); err != nil {
			return nil, fmt.Errorf("trigger: %s: reading the schedule's state: %w", r.Schedule.ActivityID, err)
		}
	}
	var (
		started []Run
		errs    []error
	)
	// Runs another holder had: done, still running, or dead and ours now.
	pend := make([]pendingRun, 0, len(r.pending))
	for _, p := range r.pending {
		pend = append(pend, p)
	}
	slices.SortFunc(pend, func(a, b pendingRun) int { return a.run.ScheduledFor.Compare(b.run.ScheduledFor) })
	for _, p := range pend {
		o, err := r.start(ctx, p.run)
		switch {
		case o.settled:
			delete(r.pending, p.run.Key)
			if err == nil {
				started = append(started, p.run)
			}
		case o.running:
			r.pending[p.run.Key] = pendingRun{p.run, r.Now().Add(o.leaseLeft)}
		}
		if err != nil && !errors.Is(err, ErrAlreadyStarted) {
			errs = append(errs, fmt.Errorf("trigger: %s: %w", p.run.Key, err))
		}
	}

	runs, discarded := r.Schedule.plan(r.sched, r.cursor, now)
	if discarded > 0 {
		r.Logger.Info("trigger: missed slots discarded", "activity", r.Schedule.ActivityID, "discarded", discarded, "policy", r.Schedule.Misfire)
	}
	cursor := now
	for _, run := range runs {
		o, err := r.start(ctx, run)
		if err == nil {
			started = append(started, run)
		} else if !errors.Is(err, ErrAlreadyStarted) {
			errs = append(errs, fmt.Errorf("trigger: %s: %w", run.Key, err))
		}
		if o.running {
			r.pending[run.Key] = pendingRun{run, r.Now().Add(o.leaseLeft)}
		}
		if !o.settled && !o.running {
			// Not recorded: the store failed, or the job failed and its
			// key was released. The cursor stays before the run, so the
			// next tick plans it again with whatever came since.
			cursor = run.WindowStart.Add(-time.Nanosecond)
			break
		}
	}
	if cursor.After(r.cursor) {
		r.cursor = cursor
	}
	return started, errors.Join(errs...)
}

// start starts run's job under the slot's key. A job that has started runs
// to its end even when ctx is canceled (a replica shutting down): a job cut
// off half-way may have had its effect and then be recorded as failed, and
// the slot would run again elsewhere. Its lease still ends it if the process
// dies, and losing the lease still cancels it; Run returns once it is done.
func (r *Runner) start(ctx context.Context, run Run) (outcome, error) {
	return r.Starter.start(context.WithoutCancel(ctx), run.Key, func(ctx context.Context) error { return r.Job(ctx, run) })
}

// recover sets the cursor from the store: not before the schedule's
// origin, not further back than the misfire policy would look, and for
// skip and compress after the latest settled slot. Slots found in progress
// become pending.
func (r *Runner) recover(ctx context.Context, now time.Time) error {
	origin := r.Since.UTC()
	if origin.IsZero() {
		var err error
		if origin, err = r.origin(ctx); err != nil {
			return err
		}
	}
	eng := r.Starter.Engine
	lower := origin
	if h := now.Add(-eng.Policy().TTL); h.After(lower) {
		// Records older than the TTL are forgotten: nothing before it can
		// be told apart from a slot that never ran.
		lower = h
	}
	// The latest slots up to now: as many as the policy could run, and a
	// few older ones in which a replica may have died mid-slot.
	look := r.Schedule.keep()
	if r.Schedule.Misfire == MisfireCompress {
		look = maxLookback
	}
	var ring []time.Time
	for t, n := r.sched.Next(lower), 0; !t.IsZero() && !t.After(now) && n < maxScan; t, n = r.sched.Next(t), n+1 {
		if len(ring) == look+deadLookback {
			ring = ring[1:]
		}
		ring = append(ring, t)
	}
	window := max(len(ring)-look, 0) // ring[window:] is what the policy could run
	cursor := lower
	if window > 0 {
		cursor = ring[window].Add(-time.Nanosecond)
	}
	settled, past := false, 0
	for i := len(ring) - 1; i >= 0 && past <= deadLookback; i-- {
		if settled {
			past++
		}
		t := ring[i]
		key := SlotKey(r.Schedule.ActivityID, t)
		rec, err := eng.Lookup(ctx, r.Starter.Scope, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case rec.State == store.InProgress:
			run := Run{ActivityID: r.Schedule.ActivityID, Key: key, ScheduledFor: t, WindowStart: t, WindowEnd: t, Slots: 1}
			r.pending[key] = pendingRun{run, r.Now().Add(rec.LeaseLeft)}
		case !settled && i >= window:
			settled = true
			// Catch-up plans every slot it could run again: one that
			// failed and was released, or whose runner stopped before it
			// was recorded, runs now; the recorded ones start nothing.
			// Compress must start after its last run, whose window stood
			// for the slots before it.
			if r.Schedule.Misfire != MisfireCatchUp {
				cursor = t
			}
		}
	}
	r.cursor = cursor
	return nil
}

// origin returns when the schedule began over this store, recording this
// runner's first tick if no runner has yet.
func (r *Runner) origin(ctx context.Context) (time.Time, error) {
	p := r.Starter.Engine.Policy()
	p.TTL = max(p.TTL, originTTL)
	eng := r.Starter.Engine.WithPolicy(p)
	first := r.first.Format(time.RFC3339Nano)
	res, err := eng.Do(ctx, idem.Call{Scope: r.Starter.Scope, Key: "schedule-origin:" + r.Schedule.ActivityID}, func(context.Context) ([]byte, error) {
		return []byte(first), nil
	})
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, string(res.Value))
	if err != nil {
		return time.Time{}, fmt.Errorf("stored origin %q: %w", res.Value, err)
	}
	return t.UTC(), nil
}

// retryAfterError is how soon Run ticks again after a failed tick, if no
// slot comes sooner.
const retryAfterError = 10 * time.Second

// Run ticks at every slot of the schedule, and when a pending run's lease
// runs out, until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.init(); err != nil {
		return err
	}
	for {
		_, err := r.Tick(ctx)
		if err != nil {
			r.Logger.Warn("trigger: tick failed", "activity", r.Schedule.ActivityID, "err", err)
		}
		now := r.Now().UTC()
		wake := r.sched.Next(now)
		if err != nil {
			wake = minTime(wake, now.Add(retryAfterError))
		}
		r.mu.Lock()
		for _, p := range r.pending {
			if p.leaseUntil.After(now) {
				wake = minTime(wake, p.leaseUntil.Add(time.Millisecond))
			} else {
				wake = minTime(wake, now.Add(time.Second))
			}
		}
		r.mu.Unlock()
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
