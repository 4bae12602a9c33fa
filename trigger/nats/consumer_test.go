package nats

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/trigger/internal/consumetest"
)

// The environment of a consumer process, besides killtest's.
const (
	envURL    = "IDEM_KILLTEST_NATS"
	envStream = "IDEM_KILLTEST_STREAM"
)

const durable = "workers"

func TestMain(m *testing.M) {
	if h, ctx := killtest.Child(); h != nil {
		os.Exit(consumerProcess(ctx, h))
	}
	testkit.VerifyTestMain(m)
}

// consumerProcess is one consumer replica: the Consumer over the shared
// durable consumer, handling killtest's effect.
func consumerProcess(ctx context.Context, h *killtest.Harness) int {
	nc, err := natsgo.Connect(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	cons, err := js.Consumer(ctx, os.Getenv(envStream), durable)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	c := &Consumer{
		Starter:    h.Starter,
		ActivityID: killtest.Activity,
		Handler: func(ctx context.Context, msg jetstream.Msg) error {
			id, err := EventID(msg)
			if err != nil {
				return err
			}
			return h.Handle(ctx, id)
		},
		RetryDelay: 100 * time.Millisecond,
		// Shorter than AckWait, so only a dead consumer's messages are
		// redelivered.
		InProgressEvery: 300 * time.Millisecond,
		Logger:          consumetest.Quiet(),
		afterRecord:     h.Recorded,
	}
	c.Consume(ctx, cons, jetstream.PullMaxMessages(8))
	return 0
}

// Three consumer processes share a durable JetStream consumer and an idem
// PostgreSQL store. The events of each of consumetest.KillTests' runs are
// published (one in 20 twice, as a
// publisher retrying after a lost publish ack does, with the same
// Nats-Msg-Id). Handlers write their effect with pgtx.RunLog.Once, as the
// package documents. Consumers are killed with SIGKILL:
//   - in the middle of a handler, before the effect: the message is
//     redelivered after AckWait, which is shorter than the idem lease; the
//     consumer that gets it finds the event still held, naks it until the
//     dead holder's lease is over, and then runs it;
//   - after the effect's statement, before its transaction commits: the
//     effect is rolled back with the run log's mark, and the event runs
//     again after the lease;
//   - after that commit, before idem's record: the event is delivered
//     again, its handler finds it in the run log (trigger.ErrAlreadyStarted),
//     and the message is acked without a second effect;
//   - after the record, before the ack: the redelivery is acked without
//     running.
//
// Each event's effect happens exactly once and none is lost.
func TestKilledConsumers(t *testing.T) {
	t.Parallel()
	consumetest.KillTests(t, killedConsumers)
}

// killedConsumers runs cfg through its consumer processes (cfg's broker
// fields are set here).
func killedConsumers(t *testing.T, cfg killtest.Config) {
	url := testenv.NATS(t)
	nc, err := natsgo.Connect(url)
	if err != nil {
		testenv.Unavailable(t, "NATS at %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout+time.Minute)
	defer cancel()
	name := fmt.Sprintf("IDEM_KILLTEST_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	subject := "idem.killtest." + name
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
	})
	if err != nil {
		testenv.Unavailable(t, "JetStream at %s: %v", url, err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second,
		MaxDeliver: -1, MaxAckPending: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}

	cfg.ChildEnv = []string{envURL + "=" + url, envStream + "=" + name}
	killtest.Run(t, cfg, func(ids []string) {
		for i, id := range ids {
			if _, err := js.Publish(ctx, subject, []byte(id), jetstream.WithMsgID(id)); err != nil {
				t.Fatal(err)
			}
			if i%20 == 0 { // the publisher's retry
				if ack, err := js.Publish(ctx, subject, []byte(id), jetstream.WithMsgID(id)); err != nil || !ack.Duplicate {
					t.Fatalf("republished %s: duplicate %v, %v", id, ack != nil && ack.Duplicate, err)
				}
			}
		}
	}, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs != uint64(cfg.Events) {
		t.Fatalf("stream holds %d messages, want %d: %v", info.State.Msgs, cfg.Events, err)
	}
}
