package nats_test

import (
	"context"
	"log"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
	trignats "github.com/idem-dev/idem/trigger/nats"
)

// Each replica of an ingest service runs this; a shared store (PostgreSQL,
// Redis) in place of memory makes the replicas run each event once between
// them.
func ExampleConsumer() {
	ctx := context.Background()
	nc, err := natsgo.Connect(natsgo.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, "EVENTS", "ingest")
	if err != nil {
		log.Fatal(err)
	}
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	c := &trignats.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: "550e8400-e29b-41d4-a716-446655440000",
		Handler: func(ctx context.Context, msg jetstream.Msg) error {
			log.Printf("event %s", msg.Data())
			return nil
		},
	}
	log.Fatal(c.Consume(ctx, cons))
}
