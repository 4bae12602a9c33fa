// Package temporal runs idem's trigger IDs and schedules on Temporal, for
// users whose activities already run there (the activity runner's system). It is its
// own Go module, github.com/idem-dev/idem/trigger/temporal, so that the
// Temporal SDK and its gRPC and OpenTelemetry dependencies (about 45
// modules) reach only the users who import it.
//
// The activity runner's contract, mapped:
//
//   - Events: a Router computes trigger.EventKey(activityID, eventID) and
//     starts the activity's workflow under it with a Starter
//     (REJECT_DUPLICATE, conflict policy FAIL). A redelivered event's start
//     fails with Temporal's WorkflowExecutionAlreadyStarted, which the
//     Starter reports as trigger.ErrAlreadyStarted and the Router logs and
//     skips.
//   - Task instances: ExecuteTask starts a child workflow under
//     trigger.TaskKey(runID, taskType, index), so a run spawned again
//     spawns no task twice.
//   - Schedules: ScheduleOptions turns a trigger.Schedule (the same value
//     the embedded trigger.Runner takes) into a Temporal schedule whose
//     fires start SlotWorkflow; it plans the missed slots by the misfire
//     policy (skip, catchup at most MaxCatchUp, compress into one wide run)
//     and starts each run under trigger.SlotKey(activityID, slot) with
//     REJECT_DUPLICATE. Backfill fires a past span, bounded the same way.
//     A definition whose dedupe strategy is not its misfire policy is
//     refused (trigger.ErrStrategyMismatch).
//
// Workers register SlotWorkflow and its activity with Register, next to
// the run workflow, which takes one trigger.Run (its slot, and for
// compress the window of slots it stands for).
package temporal
