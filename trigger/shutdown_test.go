package trigger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

// TestShutdownLetsTheJobFinish: a replica stopped (its Run context
// canceled) while a slot's job runs lets that job finish and records it.
// A job cut off half-way may already have had its effect; recorded as
// failed, the slot would run again on another replica.
func TestShutdownLetsTheJobFinish(t *testing.T) {
	t.Parallel()
	st := memory.New()
	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
	t.Cleanup(func() { eng.Close() })
	started, release := make(chan trigger.Run, 1), make(chan struct{})
	jobErr := make(chan error, 1)
	r := &trigger.Runner{
		Schedule: trigger.Schedule{ActivityID: "shutdown", Cron: "@every 1s", Misfire: trigger.MisfireSkip},
		Starter:  &trigger.Starter{Engine: eng, Scope: "activities"},
		Job: func(ctx context.Context, run trigger.Run) error {
			select {
			case started <- run:
			default:
				return nil
			}
			<-release
			jobErr <- ctx.Err()
			return ctx.Err()
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var run trigger.Run
	select {
	case run = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no slot started")
	}
	cancel() // the replica is told to stop while the job runs
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-jobErr; err != nil {
		t.Fatalf("the running job's context was canceled by the shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	rec, err := eng.Lookup(context.Background(), "activities", run.Key)
	if err != nil || rec.State != store.Succeeded {
		t.Fatalf("slot %s after shutdown: %+v, %v; want succeeded", run.Key, rec.State, err)
	}
}
