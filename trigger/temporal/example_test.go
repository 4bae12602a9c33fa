package temporal_test

import (
	"context"
	"log"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/idem-dev/idem/trigger"
	tt "github.com/idem-dev/idem/trigger/temporal"
)

// The activity runner's flow on Temporal: an hourly schedule that compresses missed
// runs, an event router, and the workers that run both.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(client.Options{HostPort: "127.0.0.1:7233"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Workers: the run workflow, and the slot workflow schedules fire.
	w := worker.New(c, "activities", worker.Options{})
	w.RegisterWorkflowWithOptions(RunActivityWorkflow, workflow.RegisterOptions{Name: "RunActivityWorkflow"})
	tt.Register(w, c)
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	// Cron trigger: the same Schedule the embedded runner takes.
	o, err := tt.ScheduleOptions("report-hourly", trigger.Schedule{
		ActivityID: "550e8400-e29b-41d4-a716-446655440000", Cron: "@hourly",
		Misfire: trigger.MisfireCompress, DedupeStrategy: "compress",
	}, "RunActivityWorkflow", "activities")
	if err != nil {
		log.Fatal(err) // e.g. trigger.ErrStrategyMismatch
	}
	if _, err := c.ScheduleClient().Create(ctx, o); err != nil {
		log.Fatal(err)
	}

	// External events: steps 1-3 of the seed's event router.
	router := &tt.Router{Starter: &tt.Starter{Client: c, TaskQueue: "activities"}, Workflow: "RunActivityWorkflow"}
	started, err := router.Route(ctx, "550e8400-e29b-41d4-a716-446655440000", "evt_abc123", trigger.Run{})
	log.Println(started, err) // false, nil for a redelivered event
}
