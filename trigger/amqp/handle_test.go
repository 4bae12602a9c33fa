package amqp

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/trigger"
	"github.com/idem-dev/idem/trigger/internal/consumetest"
)

// broker is a queue of its own on a connection of the test's.
type broker struct {
	conn  *amqp091.Connection
	ch    *amqp091.Channel // the test's: publishes and inspects
	queue string
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	url := testenv.RabbitMQ(t)
	conn, err := amqp091.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ at %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("idem.handle.%d.%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(queue, false, false, false) })
	return &broker{conn: conn, ch: ch, queue: queue}
}

func (b *broker) publish(t *testing.T, id string) {
	t.Helper()
	if err := b.ch.PublishWithContext(context.Background(), "", b.queue, false, false, amqp091.Publishing{MessageId: id, Body: []byte(id)}); err != nil {
		t.Fatal(err)
	}
}

// ready returns how many messages the queue holds ready for delivery;
// once the consumer's channel is closed, that includes every one it did
// not ack.
func (b *broker) ready(t *testing.T) int {
	t.Helper()
	q, err := b.ch.QueueDeclarePassive(b.queue, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// harness is b as consumetest's scenarios use it.
func (b *broker) harness(t *testing.T) consumetest.Harness {
	return consumetest.NewHarness(t, func(id string) { b.publish(t, id) }, func(starter *trigger.Starter, c consumetest.Config) (func(), func() error) {
		return run(t, &Consumer{
			Handler: func(ctx context.Context, d amqp091.Delivery) error { return c.Handler(ctx, d.MessageId) },
			Starter: starter, ActivityID: consumetest.Activity, Logger: consumetest.Quiet(),
			RetryDelay: c.RetryDelay, DrainTimeout: c.DrainTimeout,
		}, b)
	})
}

// run runs c on a channel of its own until cancel is called; wait
// returns Consume's error once the channel is closed (RabbitMQ has
// requeued what was not acked), or fails t if Consume does not return.
func run(t *testing.T, c *Consumer, b *broker) (cancel func(), wait func() error) {
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(4, 0, false); err != nil {
		t.Fatal(err)
	}
	return consumetest.Run(t, func(ctx context.Context) error {
		return c.Consume(ctx, ch, b.queue, "test")
	}, func() {
		closed := make(chan error, 1)
		go func() { closed <- ch.Close() }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Error("closing the consumer's channel after Consume returned hung")
		}
	})
}

// An event whose effect committed with its mark in the run log, but
// whose consumer died before idem's record was written, is delivered
// again: the handler, written as the package documents, gets
// trigger.ErrAlreadyStarted from RunLog.Once and returns it. The event is
// handled, so the delivery is acked (without a requeue), and the effect
// does not run again.
func TestHandledBeforeIsAcked(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	cancel, wait, handled, effects, second := consumetest.HandledBefore(t, b.harness(t), killtest.Setup(t))
	consumetest.WaitFor(t, second, "second delivery")
	cancel() // the second handler finishes, and is acked, before Consume returns
	wait()
	if n, e, r := handled.Load(), effects.Load(), b.ready(t); n != 2 || e != 1 || r != 0 {
		t.Fatalf("handler ran %d times with %d effects, %d messages back in the queue; want 2 runs (each event once), 1 effect (evt_2's), none back",
			n, e, r)
	}
}

// A consumer told to stop while a handler runs lets the handler finish
// under a context that is not canceled (DrainTimeout is far off), and acks
// its delivery: it is not requeued. The next delivery, prefetched but not
// begun, goes back to the queue, and the next consumer gets it. Closing
// the channel once Consume has returned does not hang.
func TestStopLetsHandlerFinish(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	h := b.harness(t)
	c, handled, second := consumetest.StopLetsHandlerFinish(t, h)
	if n, r := handled.Load(), b.ready(t); n != 1 || r != 1 {
		t.Fatalf("after the drain: %d handler runs, %d messages back in the queue; want the first delivery acked after 1 run, the second back", n, r)
	}
	cancel, wait := h.Run(c)
	consumetest.WaitFor(t, second, "second delivery")
	cancel()
	wait()
	if n, r := handled.Load(), b.ready(t); n != 2 || r != 0 {
		t.Fatalf("%d handler runs, %d messages back in the queue; want 2 runs, each delivery once, and none back", n, r)
	}
}

// A handler that does not finish when the consumer is told to stop is cut
// off DrainTimeout later, not sooner: its context ends then, and its
// delivery is not acked.
func TestStopIsBounded(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	consumetest.StopIsBounded(t, b.harness(t))
	if r := b.ready(t); r != 1 {
		t.Fatalf("%d messages back in the queue; want the delivery of the handler cut off", r)
	}
}
