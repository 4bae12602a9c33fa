package amqp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem/trigger"
	"github.com/idem-dev/idem/trigger/internal/consume"
)

// ErrNoEventID: a delivery carries no stable event ID, so it cannot be run
// once. The Consumer rejects it without requeue (to the queue's
// dead-letter exchange, if it has one) and logs it.
var ErrNoEventID = errors.New("trigger/amqp: delivery has no event ID")

// Defaults of a Consumer's zero fields.
const (
	DefaultRetryDelay   = consume.DefaultRetryDelay
	DefaultMaxHold      = 5 * time.Second
	DefaultDrainTimeout = consume.DefaultDrainTimeout
)

// Consumer runs Handler once per event ID. Its zero-value optional fields
// take the defaults documented on them.
type Consumer struct {
	// Starter keeps the event IDs; replicas share its store and scope.
	Starter *trigger.Starter
	// ActivityID names what the events trigger (the activity runner's activity).
	ActivityID string
	// Handler handles one event. Its error (or a store failure) leaves the
	// event un-acked: it is held RetryDelay and requeued. An error matching
	// trigger.ErrAlreadyStarted, which pgtx.RunLog.Once returns for an
	// event whose effect committed before, means the event is handled: it
	// is acked, and recorded as a success.
	//
	// A handler whose effect must not repeat even if the consumer dies
	// between the effect and the record of its outcome writes it with
	// pgtx.RunLog.Once (see the package example), or in the Starter's
	// transaction when its store is a pgtx.Store (pgtx.Store.Tx).
	Handler func(ctx context.Context, d amqp091.Delivery) error
	// EventID returns a delivery's stable event ID. nil means EventID, the
	// MessageId property.
	EventID func(d amqp091.Delivery) (string, error)
	// RetryDelay is how long a failed delivery is held before it is
	// requeued (RabbitMQ has no delayed requeue; holding it keeps a failing
	// event from spinning). 0 means DefaultRetryDelay (1 s).
	RetryDelay time.Duration
	// MaxHold bounds how long a delivery whose event another replica holds
	// waits for that holder's lease before it is requeued. 0 means
	// DefaultMaxHold (5 s).
	MaxHold time.Duration
	// DrainTimeout is how long the handler running when Consume's context
	// ends may go on: its context ends that long after Consume's, and if
	// it is done by then it is acked. 0 means DefaultDrainTimeout (30 s);
	// negative, none (its context ends with Consume's).
	DrainTimeout time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// afterRecord is called after the outcome is recorded and before the
	// ack: tests kill a consumer there.
	afterRecord func(eventID string)
}

// EventID is the default event ID of a delivery: its MessageId property.
func EventID(d amqp091.Delivery) (string, error) {
	if d.MessageId == "" {
		return "", ErrNoEventID
	}
	return d.MessageId, nil
}

// Consume consumes queue on ch (manual acks; set the channel's Qos
// prefetch first) and handles each delivery in turn until ctx ends or the
// channel closes. When ctx ends it drains: the handler running then goes
// on, for DrainTimeout at most, under a context that does not end with
// ctx, and its delivery is acked (or requeued) as usual; then the consumer
// is canceled at the broker and the deliveries it had been sent but had
// not begun are requeued at once, for other replicas. Once it has returned
// the channel may be closed. If the channel closes first, RabbitMQ
// requeues every delivery that was not acked.
func (c *Consumer) Consume(ctx context.Context, ch *amqp091.Channel, queue, consumerTag string) error {
	if consumerTag == "" {
		// Canceling the consumer needs its tag.
		consumerTag = "idem-" + rand.Text()
	}
	deliveries, err := ch.Consume(queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("trigger/amqp: consume %s: %w", queue, err)
	}
	timeout := c.DrainTimeout
	if timeout == 0 {
		timeout = DefaultDrainTimeout
	}
	drain := consume.NewDrain(ctx, timeout)
	defer drain.Wait()
	for {
		select {
		case <-ctx.Done():
			giveBack(ch, consumerTag, deliveries)
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("trigger/amqp: %s: channel closed", queue)
			}
			hctx, ok := drain.Begin()
			if !ok {
				d.Nack(false, true)
				giveBack(ch, consumerTag, deliveries)
				return ctx.Err()
			}
			c.handle(hctx, ctx, d)
			drain.End()
		}
	}
}

// giveBack cancels the consumer at the broker, which then sends it
// nothing more, and requeues what it had sent but not handed over yet.
// Waiting for the cancel's answer here, rather than in the background,
// also makes closing the channel safe once Consume returns: a close racing
// a cancel on one channel can take the cancel's answer and wait forever for
// its own.
func giveBack(ch *amqp091.Channel, consumerTag string, deliveries <-chan amqp091.Delivery) {
	if err := ch.Cancel(consumerTag, false); err != nil {
		return // the channel is closed: RabbitMQ has requeued them
	}
	for d := range deliveries {
		d.Nack(false, true)
	}
}

// Handle runs one delivery: the handler unless its event ran before, then
// the ack, requeue or reject. It returns what it could not do, for logging.
func (c *Consumer) Handle(ctx context.Context, d amqp091.Delivery) error {
	return c.handle(ctx, ctx, d)
}

// handle is Handle, whose handler runs with ctx and whose holds before a
// requeue end with hold (Consume's context: a stopping consumer requeues
// at once).
func (c *Consumer) handle(ctx, hold context.Context, d amqp091.Delivery) error {
	core := consume.Consumer{
		Name: "trigger/amqp", Again: "requeueing",
		Starter: c.Starter, ActivityID: c.ActivityID,
		RetryDelay: c.RetryDelay, Logger: c.Logger, AfterRecord: c.afterRecord,
	}
	id, err := consume.EventID(d, c.EventID, EventID, ErrNoEventID)
	if err != nil {
		core.Log().Error("trigger/amqp: delivery without an event ID rejected", "routing_key", d.RoutingKey, "err", err)
		return errors.Join(err, d.Reject(false))
	}
	maxHold := c.MaxHold
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	return core.Handle(ctx, id, func(ctx context.Context) error {
		return c.Handler(ctx, d)
	}, settler{d: d, hold: hold, maxHold: maxHold})
}

// settler acks a delivery, or holds it (RabbitMQ has no delayed requeue)
// and requeues it; a hold ends early when hold ends.
type settler struct {
	d       amqp091.Delivery
	hold    context.Context
	maxHold time.Duration
}

func (s settler) Ack() error { return s.d.Ack(false) }

func (s settler) Wait(delay time.Duration) error {
	return s.Retry(min(delay, s.maxHold))
}

func (s settler) Retry(delay time.Duration) error {
	wait(s.hold, delay)
	return s.d.Nack(false, true)
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
