package trigger

import (
	"errors"
	"fmt"
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

// ParseMisfire parses the activity runner's dedupe_key_strategy / misfire_policy
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
	return 0, fmt.Errorf("%w: misfire policy %q: want skip, catchup or compress", ErrInvalidSchedule, s)
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

// DefaultMaxCatchUp bounds MisfireCatchUp when Schedule.MaxCatchUp is 0.
const DefaultMaxCatchUp = 10

var (
	// ErrInvalidSchedule: a Schedule cannot be run (bad cron spec, unknown
	// misfire policy, a host-local time zone...).
	ErrInvalidSchedule = errors.New("trigger: invalid schedule")
	// ErrStrategyMismatch: an activity definition's dedupe_key_strategy is
	// not the misfire policy of its cron trigger. The activity runner keeps them in two
	// fields (how the schedule fires, how the workflow treats missed runs)
	// and requires them to agree; a compress workflow fed one slot at a
	// time by a catch-up schedule would silently do the wrong thing.
	ErrStrategyMismatch = errors.New("trigger: dedupe strategy does not match the misfire policy")
)

// CheckStrategy reports, as an error matching ErrStrategyMismatch (and
// ErrInvalidSchedule), when a definition's dedupe_key_strategy is not the
// trigger's misfire policy. An empty strategy means "as the policy".
func CheckStrategy(dedupeStrategy string, misfire Misfire) error {
	if dedupeStrategy == "" {
		return nil
	}
	m, err := ParseMisfire(dedupeStrategy)
	if err != nil {
		return fmt.Errorf("trigger: dedupe_key_strategy: %w", err)
	}
	if m != misfire {
		return fmt.Errorf("%w (%w): dedupe_key_strategy %q, misfire_policy %q", ErrStrategyMismatch, ErrInvalidSchedule, dedupeStrategy, misfire)
	}
	return nil
}

// Schedule is a cron-driven activity.
type Schedule struct {
	ActivityID string
	// Cron is a standard five-field crontab spec or a descriptor
	// ("@hourly", "@every 15m"), parsed by robfig/cron. "@every d" slots
	// are anchored to the Unix epoch (every multiple of d since
	// 1970-01-01T00:00:00Z), so replicas started at different times agree
	// on them, as Temporal's interval schedules do.
	Cron string
	// Location is the time zone Cron's fields are read in ("0 9 * * *" in
	// Asia/Kolkata fires at 03:30 UTC). nil means UTC. time.Local is
	// refused: replicas deployed with different TZ settings would disagree
	// on the slots. Slot keys are always written in UTC.
	Location *time.Location
	Misfire  Misfire
	// MaxCatchUp bounds MisfireCatchUp; 0 means DefaultMaxCatchUp (10).
	MaxCatchUp int
	// DedupeStrategy is the activity definition's dedupe_key_strategy as
	// written ("skip", "catchup", "compress"); it must name Misfire.
	// Empty means no check.
	DedupeStrategy string
}

// Validate reports why s cannot be run, as an error matching
// ErrInvalidSchedule (and ErrStrategyMismatch when that is why).
func (s Schedule) Validate() error {
	_, err := s.compile()
	return err
}

func (s Schedule) compile() (cron.Schedule, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidSchedule, s.ActivityID}, args...)...)
	}
	switch {
	case s.ActivityID == "":
		return nil, bad("no activity ID")
	case s.Misfire < MisfireSkip || s.Misfire > MisfireCompress:
		return nil, bad("unknown misfire policy %d", int(s.Misfire))
	case s.MaxCatchUp < 0:
		return nil, bad("MaxCatchUp %d is negative", s.MaxCatchUp)
	case s.Location == time.Local:
		return nil, bad("time.Local differs between hosts; name the zone (time.LoadLocation)")
	}
	if err := CheckStrategy(s.DedupeStrategy, s.Misfire); err != nil {
		return nil, fmt.Errorf("trigger: %s: %w", s.ActivityID, err)
	}
	p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	c, err := p.Parse(s.Cron)
	if err != nil {
		return nil, bad("%v", err)
	}
	switch c := c.(type) {
	case *cron.SpecSchedule:
		c.Location = s.location()
		return utcSchedule{c}, nil
	case cron.ConstantDelaySchedule:
		return every(c.Delay), nil
	}
	return nil, bad("unsupported schedule %T", c)
}

func (s Schedule) location() *time.Location {
	if s.Location == nil {
		return time.UTC
	}
	return s.Location
}

func (s Schedule) keep() int {
	switch s.Misfire {
	case MisfireCatchUp:
		if s.MaxCatchUp > 0 {
			return s.MaxCatchUp
		}
		return DefaultMaxCatchUp
	}
	return 1
}

// Interval returns the period of an "@every" schedule, and 0 for a cron
// spec. Temporal maps the two onto different schedule specs.
func (s Schedule) Interval() time.Duration {
	c, err := s.compile()
	if e, ok := c.(every); ok && err == nil {
		return time.Duration(e)
	}
	return 0
}

// utcSchedule reads a spec in its own location and answers in UTC, so that
// a process's TZ never reaches a slot or its key.
type utcSchedule struct{ s *cron.SpecSchedule }

func (u utcSchedule) Next(t time.Time) time.Time { return u.s.Next(t).UTC() }

// every is "@every d" anchored to the Unix epoch: slots are the multiples
// of d since 1970-01-01T00:00:00Z. robfig/cron counts from the time it is
// asked about, which is each replica's own start.
type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	k := n / d
	if n < 0 && n%d != 0 {
		k--
	}
	return time.Unix(0, (k+1)*d).UTC()
}

// maxScan bounds how many slots one plan walks, so that a per-second
// schedule with a cursor years ago cannot stall the runner.
const maxScan = 1 << 20

// Plan returns the runs the misfire policy makes of the slots in
// (after, upTo], oldest first, and how many slots it discarded. A Runner
// plans from its cursor; Temporal's slot workflow plans from the slot it
// was fired for.
func (s Schedule) Plan(after, upTo time.Time) (runs []Run, discarded int, err error) {
	c, err := s.compile()
	if err != nil {
		return nil, 0, err
	}
	runs, discarded = s.plan(c, after, upTo)
	return runs, discarded, nil
}

func (s Schedule) plan(c cron.Schedule, after, upTo time.Time) ([]Run, int) {
	keep := s.keep()
	var (
		first  time.Time
		recent []time.Time // the latest `keep` slots, oldest first
		count  int
	)
	for t := c.Next(after); !t.IsZero() && !t.After(upTo) && count < maxScan; t = c.Next(t) {
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
	if count == 0 {
		return nil, 0
	}
	id := s.ActivityID
	if s.Misfire == MisfireCompress {
		last := recent[len(recent)-1]
		return []Run{{ActivityID: id, Key: SlotKey(id, last), ScheduledFor: last, WindowStart: first, WindowEnd: last, Slots: count}}, 0
	}
	runs := make([]Run, 0, len(recent))
	for _, t := range recent {
		runs = append(runs, Run{ActivityID: id, Key: SlotKey(id, t), ScheduledFor: t, WindowStart: t, WindowEnd: t, Slots: 1})
	}
	return runs, count - len(recent)
}

// Run is one run of a schedule.
type Run struct {
	ActivityID string
	// Key is SlotKey(ActivityID, ScheduledFor), the run's ID.
	Key string
	// ScheduledFor is the slot, in UTC.
	ScheduledFor time.Time
	// Window is the span of slots the run stands for: [first, last]. For
	// MisfireCompress it covers every missed slot; otherwise both ends are
	// ScheduledFor.
	WindowStart, WindowEnd time.Time
	// Slots is how many slots the run stands for.
	Slots int
}
