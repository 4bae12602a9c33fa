package trigger_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

// A broker delivers one event twice; the activity starts once.
func ExampleStarter_Start() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	s := &trigger.Starter{Engine: eng, Scope: "default"}
	id := trigger.EventKey("550e8400-e29b-41d4-a716-446655440000", "evt_abc123")
	for range 2 {
		err := s.Start(context.Background(), id, func(ctx context.Context) error {
			fmt.Println("started", id)
			return nil
		})
		if errors.Is(err, trigger.ErrAlreadyStarted) {
			fmt.Println("already started; moving on")
		}
	}
	// Output:
	// started activity-550e8400-e29b-41d4-a716-446655440000:evt_abc123
	// already started; moving on
}

// A runner that was down from 09:00 to 12:30 compresses the missed hourly
// slots into one run.
func ExampleRunner_compress() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	r := &trigger.Runner{
		Schedule: trigger.Schedule{ActivityID: "report", Cron: "@hourly", Misfire: trigger.MisfireCompress},
		Starter:  &trigger.Starter{Engine: eng},
		Job: func(ctx context.Context, run trigger.Run) error {
			fmt.Printf("%s covers %d slots from %s\n", run.Key, run.Slots, run.WindowStart.Format("15:04"))
			return nil
		},
		Since: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC),
		Now:   func() time.Time { return time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC) },
	}
	r.Tick(context.Background())
	// Output: activity-report:2026-03-01T12:00:00+00:00 covers 3 slots from 10:00
}
