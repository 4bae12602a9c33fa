package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/trigger"
)

// ErrNoEventID: an event without a stable ID reached the router. The activity runner
// requires the ingress boundary to assign one; a router cannot run an
// event once without it.
var ErrNoEventID = errors.New("trigger/temporal: event has no stable event ID")

// Starter starts workflows under trigger keys, the way the activity runner does: the
// workflow ID is the key, the ID reuse policy REJECT_DUPLICATE and the
// conflict policy FAIL, so a second start of an ID, running or closed,
// fails with trigger.ErrAlreadyStarted and starts nothing.
type Starter struct {
	Client client.Client
	// TaskQueue of the started workflows.
	TaskQueue string
	// Options, when set, adjusts the options of each start (timeouts,
	// search attributes, memo). It must not change the ID or the
	// policies. nil means none.
	Options func(*client.StartWorkflowOptions)
}

// Options returns the start options of id.
func (s *Starter) startOptions(id string) client.StartWorkflowOptions {
	o := client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                s.TaskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}
	if s.Options != nil {
		s.Options(&o)
		o.ID = id
		o.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
		o.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
		o.WorkflowExecutionErrorWhenAlreadyStarted = true
	}
	return o
}

// Start starts workflow with args under id. An ID started before gives an
// error matching trigger.ErrAlreadyStarted (and wrapping Temporal's
// WorkflowExecutionAlreadyStarted); nothing was started.
func (s *Starter) Start(ctx context.Context, id string, workflow any, args ...any) (client.WorkflowRun, error) {
	run, err := s.Client.ExecuteWorkflow(ctx, s.startOptions(id), workflow, args...)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return nil, alreadyStarted(id, err)
	}
	return run, err
}

func alreadyStarted(id string, err error) error {
	return fmt.Errorf("%w: %w", &trigger.AlreadyStartedError{ID: id}, err)
}

// IsAlreadyStarted reports whether err says a workflow or child workflow
// ID was started before: trigger.ErrAlreadyStarted or Temporal's own
// already-started errors.
func IsAlreadyStarted(err error) bool {
	return errors.Is(err, trigger.ErrAlreadyStarted) || temporal.IsWorkflowExecutionAlreadyStartedError(err)
}

// Router is the activity runner's event router: for each event it (1) computes the
// workflow ID trigger.EventKey(activityID, eventID), (2) starts Workflow
// under it with REJECT_DUPLICATE, and (3) when the ID exists (the event
// was processed before), logs it and moves on.
type Router struct {
	Starter *Starter
	// Workflow is the workflow each event starts (a function or its
	// registered name), called with the args given to Route.
	Workflow any
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Redactor prints the workflow ID (the event's key) in log lines and
	// errors as idem prints keys; the zero value prints unkeyed hashes.
	Redactor idem.Redactor
}

// Route starts the event's workflow once. It reports whether this call
// started it; a duplicate delivery returns false and no error.
func (r *Router) Route(ctx context.Context, activityID, eventID string, args ...any) (started bool, err error) {
	if eventID == "" {
		return false, ErrNoEventID
	}
	id := trigger.EventKey(activityID, eventID)
	_, err = r.Starter.Start(ctx, id, r.Workflow, args...)
	switch {
	case errors.Is(err, trigger.ErrAlreadyStarted):
		log := r.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Info("trigger/temporal: event already processed", r.Redactor.LogAttrs(slog.LevelInfo, "", id)...)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("trigger/temporal: start key_hash %s: %w", r.Redactor.Key("", id), err)
	}
	return true, nil
}

// ExecuteTask starts the index-th task of a type spawned by run runID as a
// child workflow with ID trigger.TaskKey(runID, taskType, index) and
// REJECT_DUPLICATE, from workflow code. A parent that spawns its tasks
// again (a new run of the same run ID, a reset) gets the same IDs, so no
// task is spawned twice; the future's error then satisfies
// IsAlreadyStarted. ctx's child workflow options (task queue, timeouts)
// are kept.
func ExecuteTask(ctx workflow.Context, runID, taskType string, index int, childWorkflow any, args ...any) workflow.ChildWorkflowFuture {
	o := workflow.GetChildWorkflowOptions(ctx)
	o.WorkflowID = trigger.TaskKey(runID, taskType, index)
	o.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	return workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, o), childWorkflow, args...)
}
