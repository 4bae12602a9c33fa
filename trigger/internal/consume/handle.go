package consume

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idem-dev/idem/trigger"
)

// DefaultRetryDelay is how long a message whose handler or store failed
// waits before it is delivered again, when the consumer sets no delay.
const DefaultRetryDelay = time.Second

// Settler carries out a message's fate at its broker.
type Settler interface {
	// Ack acknowledges the message: its event is handled.
	Ack() error
	// Wait delivers the message again after delay: another holder has its
	// event in progress.
	Wait(delay time.Duration) error
	// Retry delivers the message again after delay: its handler or the
	// store failed.
	Retry(delay time.Duration) error
}

// Consumer is the part of a broker consumer that does not depend on the
// broker: which events it runs, how long a failed one waits, where it logs.
type Consumer struct {
	// Name prefixes log lines: "trigger/nats".
	Name string
	// Again names a redelivery in log lines: "redelivering".
	Again      string
	Starter    *trigger.Starter
	ActivityID string
	// RetryDelay; 0 or negative means DefaultRetryDelay.
	RetryDelay time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// AfterRecord, if set, is called after the outcome is recorded and
	// before the ack: tests kill a consumer there.
	AfterRecord func(eventID string)
}

// Log returns the consumer's logger.
func (c *Consumer) Log() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// EventID reads a message's event ID with idOf, or with def when idOf is
// nil; an empty ID is the error noID.
func EventID[M any](m M, idOf, def func(M) (string, error), noID error) (string, error) {
	if idOf == nil {
		idOf = def
	}
	id, err := idOf(m)
	if err == nil && id == "" {
		err = noID
	}
	return id, err
}

// Handle runs handler once for event id (Run) and settles its message with
// s as the verdict says. It returns what it could not do, for logging.
func (c *Consumer) Handle(ctx context.Context, id string, handler func(ctx context.Context) error, s Settler) error {
	v := Run(ctx, c.Starter, c.ActivityID, id, handler)
	switch v.Action {
	case Ack:
		if v.Err != nil {
			c.Log().Debug(c.Name+": event handled before; acking", c.printed(slog.LevelDebug, id, "err", v.Err)...)
		}
		if c.AfterRecord != nil {
			c.AfterRecord(id)
		}
		return s.Ack()
	case Wait:
		// Another replica runs it, or ran it and died: deliver it again
		// when its lease ends; a start then takes a dead holder's event
		// over.
		return errors.Join(v.Err, s.Wait(v.Delay))
	default:
		delay := c.RetryDelay
		if delay <= 0 {
			delay = DefaultRetryDelay
		}
		c.Log().Warn(c.Name+": event failed; "+c.Again, c.printed(slog.LevelWarn, id, "delay", delay, "err", v.Err)...)
		return errors.Join(v.Err, s.Retry(delay))
	}
}

// printed names event id in a log line at level as the engine names the
// call it runs (scope_hash, key_hash of trigger.EventKey): an event ID is
// the key's source, what the event's publisher put in it, so it is never
// printed as it is (docs/ISOLATION.md).
func (c *Consumer) printed(level slog.Level, id string, more ...any) []any {
	attrs := c.Starter.Engine.Redactor().LogAttrs(level, c.Starter.Scope, trigger.EventKey(c.ActivityID, id))
	return append(attrs, more...)
}
