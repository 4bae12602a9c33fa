package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-dev/idem/trigger"
	"github.com/idem-dev/idem/trigger/internal/consume"
)

// ErrNoEventID: a message carries no stable event ID, so it cannot be run
// once. The Consumer terminates it (no redelivery) and logs it.
var ErrNoEventID = errors.New("trigger/nats: message has no event ID")

// Defaults of a Consumer's zero fields.
const (
	DefaultInProgressEvery = 10 * time.Second
	DefaultRetryDelay      = consume.DefaultRetryDelay
	DefaultDrainTimeout    = consume.DefaultDrainTimeout
)

// Consumer runs Handler once per event ID. Its zero-value optional fields
// take the defaults documented on them.
type Consumer struct {
	// Starter keeps the event IDs; replicas share its store and scope.
	Starter *trigger.Starter
	// ActivityID names what the events trigger (the activity runner's activity).
	ActivityID string
	// Handler handles one event. Its error (or a store failure) leaves the
	// event un-acked: it is nak'ed and redelivered after RetryDelay. An
	// error matching trigger.ErrAlreadyStarted, which pgtx.RunLog.Once
	// returns for an event whose effect committed before, means the event
	// is handled: it is acked, and recorded as a success.
	//
	// A handler whose effect must not repeat even if the consumer dies
	// between the effect and the record of its outcome writes it with
	// pgtx.RunLog.Once (see the package example), or in the Starter's
	// transaction when its store is a pgtx.Store (pgtx.Store.Tx).
	Handler func(ctx context.Context, msg jetstream.Msg) error
	// EventID returns a message's stable event ID. nil means EventID: the
	// publisher's Nats-Msg-Id header, else the stream and stream sequence.
	EventID func(msg jetstream.Msg) (string, error)
	// InProgressEvery is how often a running handler tells the server it
	// is still working, so that a handler longer than AckWait is not
	// redelivered meanwhile. 0 means DefaultInProgressEvery (10 s, a third
	// of JetStream's default AckWait); negative never.
	InProgressEvery time.Duration
	// RetryDelay is the redelivery delay of an event whose handler or
	// store failed. 0 means DefaultRetryDelay (1 s).
	RetryDelay time.Duration
	// DrainTimeout is how long the handlers running when Consume's context
	// ends may go on: their context ends that long after Consume's, and
	// those done by then are acked. 0 means DefaultDrainTimeout (30 s);
	// negative, none (their context ends with Consume's).
	DrainTimeout time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// afterRecord is called after the outcome is recorded and before the
	// ack: tests kill a consumer there.
	afterRecord func(eventID string)
}

// EventID is the default event ID of a message: its Nats-Msg-Id header
// (what the publisher deduplicates with), else "<stream>:<sequence>", which
// every redelivery of the stored message shares.
func EventID(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id, nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoEventID, err)
	}
	return md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// Consume runs the Consumer on cons until ctx ends, then drains: the
// handlers running then go on, for DrainTimeout at most, under a context
// that does not end with ctx, and are acked (or nak'ed) as usual; messages
// delivered but not begun are nak'ed for another replica. It returns once
// they are all done. opts are passed to cons.Consume.
func (c *Consumer) Consume(ctx context.Context, cons jetstream.Consumer, opts ...jetstream.PullConsumeOpt) error {
	timeout := c.DrainTimeout
	if timeout == 0 {
		timeout = DefaultDrainTimeout
	}
	drain := consume.NewDrain(ctx, timeout)
	defer drain.Wait()
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		hctx, ok := drain.Begin()
		if !ok {
			msg.Nak()
			return
		}
		defer drain.End()
		c.Handle(hctx, msg)
	}, opts...)
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return ctx.Err()
}

// Handle runs one message: the handler unless its event ran before, then
// the ack, nak or term. It returns what it could not do, for logging; the
// message has then been nak'ed or terminated (or its ack was lost, and the
// redelivery will be acked without running).
func (c *Consumer) Handle(ctx context.Context, msg jetstream.Msg) error {
	core := consume.Consumer{
		Name: "trigger/nats", Again: "redelivering",
		Starter: c.Starter, ActivityID: c.ActivityID,
		RetryDelay: c.RetryDelay, Logger: c.Logger, AfterRecord: c.afterRecord,
	}
	id, err := consume.EventID(msg, c.EventID, EventID, ErrNoEventID)
	if err != nil {
		core.Log().Error("trigger/nats: message without an event ID terminated", "subject", msg.Subject(), "err", err)
		return errors.Join(err, msg.TermWithReason("no event ID"))
	}
	return core.Handle(ctx, id, func(ctx context.Context) error {
		return c.Handler(ctx, msg)
	}, settler{ctx: ctx, msg: msg, stop: c.keepAlive(msg)})
}

// settler stops the message's keep-alive, then acks it, or naks it with a
// redelivery delay.
type settler struct {
	ctx  context.Context
	msg  jetstream.Msg
	stop func()
}

func (s settler) Ack() error {
	s.stop()
	return s.msg.DoubleAck(context.WithoutCancel(s.ctx))
}

func (s settler) Wait(delay time.Duration) error {
	s.stop()
	return s.msg.NakWithDelay(delay)
}

func (s settler) Retry(delay time.Duration) error {
	s.stop()
	return s.msg.NakWithDelay(delay)
}

// keepAlive sends InProgress every InProgressEvery until stop is called.
func (c *Consumer) keepAlive(msg jetstream.Msg) (stop func()) {
	every := c.InProgressEvery
	if every == 0 {
		every = DefaultInProgressEvery
	}
	if every < 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				msg.InProgress()
			}
		}
	}()
	return func() { close(done); <-finished }
}
