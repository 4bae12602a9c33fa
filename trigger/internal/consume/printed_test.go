package consume

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

type settled struct{}

func (settled) Ack() error                { return nil }
func (settled) Wait(time.Duration) error  { return nil }
func (settled) Retry(time.Duration) error { return nil }

// An event ID is its key's source, what the event's publisher put in it:
// the consumer's log lines name an event as the engine names its call
// (key_hash of trigger.EventKey), never as it is, at Warn and at Debug.
func TestLogsPrintEventKeyHash(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	c := &Consumer{Name: "test", Again: "redelivering", Starter: &trigger.Starter{Engine: eng, Scope: "q"}, ActivityID: "a",
		RetryDelay: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	const id = "raw-event-id-4111"
	ctx := context.Background()
	_ = c.Handle(ctx, id, func(context.Context) error { return errors.New("down") }, settled{})
	_ = c.Handle(ctx, id, func(context.Context) error { return nil }, settled{})
	// Handled before: the Debug line carries the AlreadyStartedError.
	_ = c.Handle(ctx, id, func(context.Context) error { return nil }, settled{})
	printed := eng.Redactor().Key("q", trigger.EventKey("a", id))
	out := buf.String()
	if strings.Contains(out, id) || strings.Count(out, printed) < 3 {
		t.Fatalf("want key_hash=%s on the failure and the acking lines (and in the error), never the raw event ID:\n%s", printed, out)
	}
}
