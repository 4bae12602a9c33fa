package temporal

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/idem-dev/idem/trigger"
)

// The registered names of the workflow and activity a schedule runs.
const (
	SlotWorkflowName  = "idem.trigger.Slot"
	latestStartedName = "idem.trigger.LatestStarted"
)

// Slot is what a schedule's action hands to SlotWorkflow: the schedule, as
// plain values, and the workflow each run starts.
type Slot struct {
	ActivityID     string
	Cron           string
	Location       string // IANA name; "" means UTC
	Misfire        string // "skip", "catchup" or "compress"
	MaxCatchUp     int
	DedupeStrategy string
	// Workflow is the registered name of the run workflow; it is called
	// with one trigger.Run.
	Workflow string
	// TaskQueue of the runs; "" means the slot workflow's.
	TaskQueue string
}

// NewSlot returns the Slot of s running workflow (a registered name).
func NewSlot(s trigger.Schedule, workflow, taskQueue string) (Slot, error) {
	if err := s.Validate(); err != nil {
		return Slot{}, err
	}
	loc := ""
	if s.Location != nil {
		loc = s.Location.String()
	}
	return Slot{
		ActivityID: s.ActivityID, Cron: s.Cron, Location: loc, Misfire: s.Misfire.String(),
		MaxCatchUp: s.MaxCatchUp, DedupeStrategy: s.DedupeStrategy, Workflow: workflow, TaskQueue: taskQueue,
	}, nil
}

// Schedule returns the trigger.Schedule the Slot describes, validated.
func (sl Slot) Schedule() (trigger.Schedule, error) {
	m, err := trigger.ParseMisfire(sl.Misfire)
	if err != nil {
		return trigger.Schedule{}, err
	}
	s := trigger.Schedule{ActivityID: sl.ActivityID, Cron: sl.Cron, Misfire: m, MaxCatchUp: sl.MaxCatchUp, DedupeStrategy: sl.DedupeStrategy}
	if sl.Location != "" && sl.Location != "UTC" {
		if s.Location, err = time.LoadLocation(sl.Location); err != nil {
			return trigger.Schedule{}, fmt.Errorf("%w: %v", trigger.ErrInvalidSchedule, err)
		}
	}
	return s, s.Validate()
}

// ScheduleOptions returns the options of a Temporal schedule with ID id
// that fires s the way the embedded trigger.Runner does, starting
// runWorkflow (a registered name) once per run with ID
// trigger.SlotKey(activity, slot):
//
//   - the spec is s's: a cron expression in s's time zone, or for
//     "@every d" an interval spec (Temporal anchors intervals to the Unix
//     epoch, as the embedded runner does);
//   - each fire starts SlotWorkflow, which plans the slots from the one it
//     was fired for up to the time a worker runs it, by s's misfire
//     policy (skip: the latest; catchup: each of the latest MaxCatchUp,
//     oldest first; compress: one run whose window covers them all), and
//     starts each run as a child workflow under its slot key with
//     REJECT_DUPLICATE, so nothing runs twice;
//   - overlap BUFFER_ONE: while workers are down, the first missed fire
//     waits for them and one more is buffered; the rest are dropped by
//     Temporal and covered by the waiting slot workflow's plan;
//   - a catch-up window (for a Temporal server that was down) of one
//     minute under skip, and Temporal's default of a year otherwise, the
//     first missed fire then planning the rest.
//
// A definition whose dedupe strategy does not match its misfire policy is
// refused with trigger.ErrStrategyMismatch.
func ScheduleOptions(id string, s trigger.Schedule, runWorkflow, taskQueue string) (client.ScheduleOptions, error) {
	slot, err := NewSlot(s, runWorkflow, taskQueue)
	if err != nil {
		return client.ScheduleOptions{}, err
	}
	spec := client.ScheduleSpec{TimeZoneName: slot.Location}
	if d := s.Interval(); d > 0 {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: d}}
		spec.TimeZoneName = ""
	} else {
		spec.CronExpressions = []string{s.Cron}
	}
	o := client.ScheduleOptions{
		ID:   id,
		Spec: spec,
		Action: &client.ScheduleWorkflowAction{
			ID:        "slot-" + s.ActivityID,
			Workflow:  SlotWorkflowName,
			Args:      []any{slot},
			TaskQueue: taskQueue,
		},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	}
	if s.Misfire == trigger.MisfireSkip {
		o.CatchupWindow = time.Minute
	}
	return o, nil
}

// Backfill asks the schedule to fire for the slots in [from, to], as
// the activity runner's catchup policy does with schedule.handle.backfill() after a
// pause: the first slot's SlotWorkflow plans every slot from it to now by
// the misfire policy, so the backfill is bounded by MaxCatchUp under
// catchup, one run under skip, and one wide run under compress; slots that
// already ran are not run again. Like every slot workflow it catches up to
// the time its runs finish: slots that come due while they run are run
// too, even when the schedule is paused.
func Backfill(ctx context.Context, h client.ScheduleHandle, from, to time.Time) error {
	return h.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{{
		Start: from, End: to, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	}}})
}

// SlotResult is what a SlotWorkflow did.
type SlotResult struct {
	Ran            []trigger.Run // runs it started and that completed
	Failed         []string      // keys of runs that failed
	AlreadyStarted int           // runs another slot workflow had started
	Discarded      int           // slots the misfire policy discarded
}

// Register registers SlotWorkflow and its activity on w; c is the client
// the activity reads workflow IDs with.
func Register(w worker.Registry, c client.Client) {
	w.RegisterWorkflowWithOptions(SlotWorkflow, workflow.RegisterOptions{Name: SlotWorkflowName})
	w.RegisterActivityWithOptions((&slotActivities{c: c}).LatestStarted, activity.RegisterOptions{Name: latestStartedName})
}

// maxRounds bounds how many times one slot workflow plans again for slots
// that came due while it ran.
const maxRounds = 100

// SlotWorkflow is the workflow a schedule made by ScheduleOptions fires.
// It plans the runs due from its slot up to now by the misfire policy,
// skipping slots some run already started, starts each as a child workflow
// under its slot key (oldest first, one at a time), and plans again for
// slots that came due meanwhile.
func SlotWorkflow(ctx workflow.Context, slot Slot) (SlotResult, error) {
	var res SlotResult
	s, err := slot.Schedule()
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSchedule", err)
	}
	after := scheduledTime(ctx).Add(-time.Nanosecond)
	// Short: the activity reads a few workflow IDs, and one lost with a
	// stopped worker is retried only after this timeout.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 5 * time.Second})
	for range maxRounds {
		now := workflow.Now(ctx).UTC()
		var latest time.Time
		if err := workflow.ExecuteActivity(actx, latestStartedName, slot, after, now).Get(ctx, &latest); err != nil {
			return res, err
		}
		if latest.After(after) {
			after = latest
		}
		runs, discarded, err := s.Plan(after, now)
		if err != nil {
			return res, err
		}
		res.Discarded += discarded
		if len(runs) == 0 {
			break
		}
		for _, run := range runs {
			o := workflow.GetChildWorkflowOptions(ctx)
			o.WorkflowID = run.Key
			o.TaskQueue = slot.TaskQueue
			o.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
			o.ParentClosePolicy = enumspb.PARENT_CLOSE_POLICY_ABANDON
			err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, o), slot.Workflow, run).Get(ctx, nil)
			switch {
			case IsAlreadyStarted(err):
				res.AlreadyStarted++
			case err != nil:
				workflow.GetLogger(ctx).Warn("trigger/temporal: run failed", "workflow_id", run.Key, "err", err)
				res.Failed = append(res.Failed, run.Key)
			default:
				res.Ran = append(res.Ran, run)
			}
		}
		after = runs[len(runs)-1].ScheduledFor
	}
	return res, nil
}

// scheduledTime is the slot a schedule fired the workflow for: Temporal's
// TemporalScheduledStartTime search attribute, else the start time.
func scheduledTime(ctx workflow.Context) time.Time {
	key := temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")
	if t, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(key); ok && !t.IsZero() {
		return t.UTC()
	}
	return workflow.GetInfo(ctx).WorkflowStartTime.UTC()
}

type slotActivities struct{ c client.Client }

// LatestStarted returns the latest slot in (after, upTo] whose run
// workflow exists (running or closed), or after when none does: where the
// plan of a slot workflow starts so that a buffered fire does not plan
// again what an earlier one covered.
func (a *slotActivities) LatestStarted(ctx context.Context, slot Slot, after, upTo time.Time) (time.Time, error) {
	s, err := slot.Schedule()
	if err != nil {
		return time.Time{}, err
	}
	// Every slot in the span, newest last.
	s.Misfire, s.MaxCatchUp, s.DedupeStrategy = trigger.MisfireCatchUp, 1000, ""
	runs, _, err := s.Plan(after, upTo)
	if err != nil {
		return time.Time{}, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		_, err := a.c.DescribeWorkflow(ctx, runs[i].Key, "")
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return runs[i].ScheduledFor, nil
		case errors.As(err, &notFound):
			continue
		default:
			return time.Time{}, err
		}
	}
	return after, nil
}
