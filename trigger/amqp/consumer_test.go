package amqp

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/trigger/internal/consumetest"
)

// The environment of a consumer process, besides killtest's.
const (
	envURL   = "IDEM_KILLTEST_AMQP"
	envQueue = "IDEM_KILLTEST_QUEUE"
)

func TestMain(m *testing.M) {
	if h, ctx := killtest.Child(); h != nil {
		os.Exit(consumerProcess(ctx, h))
	}
	testkit.VerifyTestMain(m)
}

// consumerProcess is one consumer replica on its own connection.
func consumerProcess(ctx context.Context, h *killtest.Harness) int {
	conn, err := amqp091.Dial(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	if err := ch.Qos(8, 0, false); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	c := &Consumer{
		Starter:    h.Starter,
		ActivityID: killtest.Activity,
		Handler: func(ctx context.Context, d amqp091.Delivery) error {
			return h.Handle(ctx, d.MessageId)
		},
		RetryDelay:  100 * time.Millisecond,
		Logger:      consumetest.Quiet(),
		afterRecord: h.Recorded,
	}
	c.Consume(ctx, ch, os.Getenv(envQueue), fmt.Sprintf("consumer-%d", h.Number))
	return 0
}

// Three consumer processes share a queue and an idem PostgreSQL store;
// the events of each of consumetest.KillTests' runs are published with
// publisher confirms, one in 20 twice (a
// publisher retrying after a lost confirm: RabbitMQ keeps both copies).
// Handlers write their effect with pgtx.RunLog.Once, as the package
// documents. Consumers are killed with SIGKILL:
//   - in the middle of a handler, before the effect: RabbitMQ requeues the
//     delivery at once; the consumer that gets it finds the event held,
//     waits out the dead holder's lease and requeues it, and the next
//     delivery runs it;
//   - after the effect's statement, before its transaction commits: the
//     effect is rolled back with the run log's mark, and the event runs
//     again after the lease;
//   - after that commit, before idem's record: the event is delivered
//     again, its handler finds it in the run log (trigger.ErrAlreadyStarted),
//     and the delivery is acked without a second effect;
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
	url := testenv.RabbitMQ(t)
	conn, err := amqp091.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ at %s: %v", url, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("idem.killtest.%d.%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(queue, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout+time.Minute)
	defer cancel()
	publish := func(id string) {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp091.Publishing{MessageId: id, Body: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := conf.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish %s not confirmed: %v", id, err)
		}
	}

	cfg.ChildEnv = []string{envURL + "=" + url, envQueue + "=" + queue}
	killtest.Run(t, cfg, func(ids []string) {
		for i, id := range ids {
			publish(id)
			if i%20 == 0 {
				publish(id)
			}
		}
	}, func() bool {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		// Messages counts ready ones; unacked ones are held by consumers,
		// which effects already cover.
		return err == nil && q.Messages == 0
	})
}
