package consumetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/trigger"
)

// Activity is the ActivityID of the scenarios' consumers.
const Activity = "ingest"

// Config is a consumer as a scenario sets it up: its handler, given the
// event's ID, and its delays. Harness.Run builds the adapter's Consumer
// from it, with the harness's Starter, the ActivityID Activity and the
// logger Quiet().
type Config struct {
	Handler      func(ctx context.Context, eventID string) error
	RetryDelay   time.Duration
	DrainTimeout time.Duration
}

// NewHarness is the Harness of an adapter whose events publish publishes
// and whose consumers run runs, all over one Starter, MemStarter(t).
func NewHarness(t *testing.T, publish func(id string), run func(starter *trigger.Starter, c Config) (cancel func(), wait func() error)) Harness {
	starter := MemStarter(t)
	return Harness{
		Run:     func(c Config) (func(), func() error) { return run(starter, c) },
		Publish: publish,
	}
}

// Harness is one broker adapter under the scenarios, on a queue (or
// stream) of the test's own.
type Harness struct {
	// Run runs a consumer of c until cancel is called; wait returns
	// Consume's error (see Run).
	Run func(c Config) (cancel func(), wait func() error)
	// Publish publishes an event whose ID is id.
	Publish func(id string)
}

// StopIsBounded: a handler that does not finish when the consumer is told
// to stop is cut off DrainTimeout later, not sooner: its context ends
// then. The caller checks then that its message was not acked.
func StopIsBounded(t *testing.T, h Harness) {
	started := make(chan struct{})
	ended := make(chan time.Time, 1)
	const bound = 500 * time.Millisecond
	cancel, wait := h.Run(Config{
		Handler: func(ctx context.Context, _ string) error {
			close(started)
			<-ctx.Done()
			ended <- time.Now()
			return ctx.Err()
		},
		DrainTimeout: bound,
		RetryDelay:   time.Minute,
	})
	h.Publish("evt_1")
	WaitFor(t, started, "handler start")
	stop := time.Now()
	cancel()
	if d := WaitFor(t, ended, "end of the handler's context").Sub(stop); d < bound {
		t.Errorf("the handler's context ended %v after the stop, before the drain's bound (%v)", d, bound)
	}
	wait()
}

// StopLetsHandlerFinish: a consumer told to stop while a handler runs lets
// the handler finish under a context that is not canceled (DrainTimeout is
// far off), and Consume returns context.Canceled once it has. Two events
// are published; the second is not begun. It returns the consumer (for
// the caller to run again and check that the second comes back), how
// many times its handler ran, and a channel closed at its second run.
func StopLetsHandlerFinish(t *testing.T, h Harness) (c Config, handled *atomic.Int32, second <-chan struct{}) {
	started, release := make(chan struct{}), make(chan struct{})
	ctxErr := make(chan error, 1)
	handled = new(atomic.Int32)
	again := make(chan struct{})
	c = Config{
		Handler: func(ctx context.Context, _ string) error {
			switch handled.Add(1) {
			case 1:
			case 2:
				close(again)
				return nil
			default:
				return nil
			}
			close(started)
			<-release
			ctxErr <- ctx.Err()
			return ctx.Err()
		},
	}
	cancel, wait := h.Run(c)
	h.Publish("evt_1")
	h.Publish("evt_2")
	WaitFor(t, started, "handler start")
	cancel()
	close(release)
	if err := WaitFor(t, ctxErr, "handler end"); err != nil {
		t.Errorf("the handler's context ended with the consumer's: %v", err)
	}
	if err := wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Consume returned %v", err)
	}
	return c, handled, again
}

// HandledBefore: an event whose effect committed with its mark in the run
// log, but whose consumer died before idem's record was written, is
// delivered again; the handler, written as the package documents, gets
// trigger.ErrAlreadyStarted from RunLog.Once and returns it. It publishes
// evt_1, marked in db's run log beforehand, and evt_2, and returns the
// running consumer, how many times its handler ran and how many effects it
// had, and a channel closed at its second run. The caller waits for both
// to be handled and checks that each ran once, evt_2's effect alone, and
// that both were acked.
func HandledBefore(t *testing.T, h Harness, db *killtest.DB) (cancel func(), wait func() error, handled, effects *atomic.Int32, second <-chan struct{}) {
	ctx := context.Background()
	if err := db.RunLog.Once(ctx, db.Pool, trigger.EventKey(Activity, "evt_1"), func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	handled, effects = new(atomic.Int32), new(atomic.Int32)
	again := make(chan struct{})
	cancel, wait = h.Run(Config{
		Handler: func(ctx context.Context, id string) error {
			if handled.Add(1) == 2 {
				close(again)
			}
			return db.RunLog.Once(ctx, db.Pool, trigger.EventKey(Activity, id), func(context.Context, pgx.Tx) error {
				effects.Add(1)
				return nil
			})
		},
		RetryDelay: 10 * time.Millisecond,
	})
	h.Publish("evt_1")
	h.Publish("evt_2")
	return cancel, wait, handled, effects, again
}
