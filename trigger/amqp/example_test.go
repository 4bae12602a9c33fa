package amqp_test

import (
	"context"
	"log"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
	trigamqp "github.com/idem-dev/idem/trigger/amqp"
)

// Each replica of an ingest service runs this; a shared store (PostgreSQL,
// Redis) in place of memory makes the replicas run each event once between
// them. Publishers set each message's MessageId to the event's ID.
func ExampleConsumer() {
	ctx := context.Background()
	conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Qos(16, 0, false)
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	c := &trigamqp.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: "550e8400-e29b-41d4-a716-446655440000",
		Handler: func(ctx context.Context, d amqp091.Delivery) error {
			log.Printf("event %s", d.MessageId)
			return nil
		},
	}
	log.Fatal(c.Consume(ctx, ch, "events", "ingest-1"))
}
