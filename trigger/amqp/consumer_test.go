package amqp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/internal/testkit/testenv"
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
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		afterRecord: h.Recorded,
	}
	c.Consume(ctx, ch, os.Getenv(envQueue), fmt.Sprintf("consumer-%d", h.Number))
	return 0
}

// Three consumer processes share a queue and an idem PostgreSQL store;
// 1,000 events are published with publisher confirms, 50 of them twice (a
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
func TestKilledConsumersRunEachEventOnce(t *testing.T) {
	t.Parallel()
	killedConsumers(t, killtest.Config{Events: 1000, Effect: killtest.RunLog,
		KillInHandler: 3, KillInEffect: 4, KillAfterEffect: 4, KillAfterRecord: 3})
}

// The same with the effect written in the Starter's transaction
// (pgtx.Store.Tx), which commits with idem's record: a kill before that
// commit leaves neither.
func TestKilledConsumersStarterTx(t *testing.T) {
	t.Parallel()
	killedConsumers(t, killtest.Config{Events: 300, Effect: killtest.StarterTx,
		KillInHandler: 1, KillInEffect: 3, KillAfterRecord: 2})
}

// The same with 10,000 events and 80 kills, and 3,000 events and 30 kills
// with the Starter's transaction (IDEM_LONG=1, make long).
func TestKilledConsumersLong(t *testing.T) {
	t.Parallel()
	if os.Getenv("IDEM_LONG") == "" {
		t.Skip("IDEM_LONG=1 runs it")
	}
	t.Run("RunLog", func(t *testing.T) {
		killedConsumers(t, killtest.Config{Events: 10000, Effect: killtest.RunLog,
			KillInHandler: 20, KillInEffect: 20, KillAfterEffect: 20, KillAfterRecord: 20})
	})
	t.Run("StarterTx", func(t *testing.T) {
		killedConsumers(t, killtest.Config{Events: 3000, Effect: killtest.StarterTx,
			KillInHandler: 10, KillInEffect: 10, KillAfterRecord: 10})
	})
}

// killedConsumers runs cfg through 3 consumer processes (cfg's broker
// fields and timeout are set here).
func killedConsumers(t *testing.T, cfg killtest.Config) {
	events := cfg.Events
	timeout := time.Minute + time.Duration(events)*90*time.Millisecond
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
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

	cfg.Consumers = 3
	cfg.ChildEnv = []string{envURL + "=" + url, envQueue + "=" + queue}
	cfg.Timeout = timeout
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
