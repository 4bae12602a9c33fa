package nats

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/trigger"
	"github.com/idem-dev/idem/trigger/internal/consumetest"
)

// broker is a stream of its own and a durable consumer on it.
type broker struct {
	js      jetstream.JetStream
	subject string
	cons    jetstream.Consumer
}

// newBroker creates a stream (deleted when t ends) and a durable consumer
// whose AckWait is long: a message un-acked during the test is redelivered
// only if it is nak'ed.
func newBroker(t *testing.T) *broker {
	t.Helper()
	url := testenv.NATS(t)
	nc, err := natsgo.Connect(url)
	if err != nil {
		testenv.Unavailable(t, "NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("IDEM_HANDLE_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{"idem.handle." + name}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		testenv.Unavailable(t, "JetStream at %s: %v", url, err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Minute, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{js: js, subject: "idem.handle." + name, cons: cons}
}

func (b *broker) publish(t *testing.T, id string) {
	t.Helper()
	if _, err := b.js.Publish(context.Background(), b.subject, []byte(id), jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

// info is the durable consumer's state.
func (b *broker) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := b.cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// waitAcked waits until the first n messages of the stream are acked.
func (b *broker) waitAcked(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info := b.info(t)
		if info.AckFloor.Stream >= n && info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of %d messages acked; %d pending ack, %d redelivered", info.AckFloor.Stream, n, info.NumAckPending, info.NumRedelivered)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// harness is b as consumetest's scenarios use it; its handlers are given
// the message's EventID.
func (b *broker) harness(t *testing.T) consumetest.Harness {
	return consumetest.NewHarness(t, func(id string) { b.publish(t, id) }, func(starter *trigger.Starter, c consumetest.Config) (func(), func() error) {
		return run(t, &Consumer{
			Handler: func(ctx context.Context, msg jetstream.Msg) error {
				id, err := EventID(msg)
				if err != nil {
					return err
				}
				return c.Handler(ctx, id)
			},
			Starter: starter, ActivityID: consumetest.Activity, Logger: consumetest.Quiet(),
			RetryDelay: c.RetryDelay, DrainTimeout: c.DrainTimeout,
		}, b)
	})
}

// run runs c on b until cancel is called; wait returns Consume's
// error, or fails t if it does not return.
func run(t *testing.T, c *Consumer, b *broker) (cancel func(), wait func() error) {
	return consumetest.Run(t, func(ctx context.Context) error { return c.Consume(ctx, b.cons) }, nil)
}

// An event whose effect committed with its mark in the run log, but
// whose consumer died before idem's record was written, is delivered
// again: the handler, written as the package documents, gets
// trigger.ErrAlreadyStarted from RunLog.Once and returns it. The event is
// handled, so the message is acked (once, without a redelivery), and the
// effect does not run again.
func TestHandledBeforeIsAcked(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	_, _, handled, effects, _ := consumetest.HandledBefore(t, b.harness(t), killtest.Setup(t))
	b.waitAcked(t, 2)
	if n, e := handled.Load(), effects.Load(); n != 2 || e != 1 {
		t.Fatalf("handler ran %d times with %d effects; want 2 runs (each event once), 1 effect (evt_2's)", n, e)
	}
}

// A consumer told to stop while a handler runs lets the handler finish
// under a context that is not canceled (DrainTimeout is far off), and acks
// its message: it is not redelivered. The next message, delivered but not
// begun, is handed back at once (a nak): the next consumer gets it, long
// before the consumer's AckWait would redeliver it.
func TestStopLetsHandlerFinish(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	h := b.harness(t)
	c, handled, _ := consumetest.StopLetsHandlerFinish(t, h)
	if info := b.info(t); info.AckFloor.Stream != 1 || handled.Load() != 1 {
		t.Fatalf("after the drain: ack floor %d, %d handler runs; want the first message acked after 1 run, the second not begun",
			info.AckFloor.Stream, handled.Load())
	}
	h.Run(c)
	b.waitAcked(t, 2)
	if n := handled.Load(); n != 2 {
		t.Fatalf("%d handler runs; want 2, each message once", n)
	}
}

// A handler that does not finish when the consumer is told to stop is cut
// off DrainTimeout later, not sooner: its context ends then, and its
// message is not acked.
func TestStopIsBounded(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	consumetest.StopIsBounded(t, b.harness(t))
	if info := b.info(t); info.AckFloor.Stream != 0 {
		t.Fatalf("the message of a handler cut off was acked (ack floor %d)", info.AckFloor.Stream)
	}
}
