package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem/trigger"
)

// ErrNoEventID: a delivery carries no stable event ID, so it cannot be run
// once. The Consumer rejects it without requeue (to the queue's
// dead-letter exchange, if it has one) and logs it.
var ErrNoEventID = errors.New("trigger/amqp: delivery has no event ID")

// Defaults of a Consumer's zero fields.
const (
	DefaultRetryDelay = time.Second
	DefaultMaxHold    = 5 * time.Second
)

// Consumer runs Handler once per event ID. Its zero-value optional fields
// take the defaults documented on them.
type Consumer struct {
	// Starter keeps the event IDs; replicas share its store and scope.
	Starter *trigger.Starter
	// ActivityID names what the events trigger (the activity runner's activity).
	ActivityID string
	// Handler handles one event. Its error (or a store failure) leaves the
	// event un-acked: it is held RetryDelay and requeued.
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
// channel closes. Deliveries not acked when it returns are redelivered by
// RabbitMQ once the channel closes.
func (c *Consumer) Consume(ctx context.Context, ch *amqp091.Channel, queue, consumerTag string) error {
	deliveries, err := ch.ConsumeWithContext(ctx, queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("trigger/amqp: consume %s: %w", queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("trigger/amqp: %s: channel closed", queue)
			}
			c.Handle(ctx, d)
		}
	}
}

// Handle runs one delivery: the handler unless its event ran before, then
// the ack, requeue or reject. It returns what it could not do, for logging.
func (c *Consumer) Handle(ctx context.Context, d amqp091.Delivery) error {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	idOf := c.EventID
	if idOf == nil {
		idOf = EventID
	}
	id, err := idOf(d)
	if err == nil && id == "" {
		err = ErrNoEventID
	}
	if err != nil {
		log.Error("trigger/amqp: delivery without an event ID rejected", "routing_key", d.RoutingKey, "err", err)
		return errors.Join(err, d.Reject(false))
	}
	err = c.Starter.Start(ctx, trigger.EventKey(c.ActivityID, id), func(ctx context.Context) error {
		return c.Handler(ctx, d)
	})
	var already *trigger.AlreadyStartedError
	switch {
	case err == nil || errors.As(err, &already) && !already.Running:
		if c.afterRecord != nil {
			c.afterRecord(id)
		}
		return d.Ack(false)
	case errors.As(err, &already):
		// Another replica runs it, or ran it and died: requeue when its
		// lease ends; a start then takes a dead holder's event over.
		maxHold := c.MaxHold
		if maxHold <= 0 {
			maxHold = DefaultMaxHold
		}
		hold(ctx, min(max(time.Until(already.LeaseUntil)+50*time.Millisecond, 100*time.Millisecond), maxHold))
		return errors.Join(err, d.Nack(false, true))
	default:
		delay := c.RetryDelay
		if delay <= 0 {
			delay = DefaultRetryDelay
		}
		log.Warn("trigger/amqp: event failed; requeueing", "event", id, "delay", delay, "err", err)
		hold(ctx, delay)
		return errors.Join(err, d.Nack(false, true))
	}
}

func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
