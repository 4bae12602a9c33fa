package amqp_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
	"github.com/idem-dev/idem/trigger"
	trigamqp "github.com/idem-dev/idem/trigger/amqp"
)

// Each replica of an ingest service runs this; the replicas share idem's
// store, so each event runs once between them. Publishers set each
// message's MessageId to the event's ID. The handler writes the event's
// effect with pgtx.RunLog.Once: the effect and the event's mark in the run
// log commit in one transaction, so that a replica killed between the
// effect and idem's record of it cannot make it happen twice. The next
// delivery finds the mark, Once returns trigger.ErrAlreadyStarted, and the
// Consumer acks the delivery.
func ExampleConsumer() {
	ctx := context.Background()
	pool, store := openStore(ctx)
	defer pool.Close()
	eng := idem.New(store, idem.Policy{})
	defer eng.Close()
	runs := pgtx.RunLog{Table: pgx.Identifier{"ingest_runs"}}
	if err := runs.Create(ctx, pool); err != nil {
		log.Fatal(err)
	}

	conn, ch := channel()
	defer conn.Close()
	const activity = "550e8400-e29b-41d4-a716-446655440000"
	c := &trigamqp.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: activity,
		Handler: func(ctx context.Context, d amqp091.Delivery) error {
			return runs.Once(ctx, pool, trigger.EventKey(activity, d.MessageId), func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO readings (event_id, body) VALUES ($1, $2)`, d.MessageId, d.Body)
				return err
			})
		},
	}
	log.Fatal(c.Consume(ctx, ch, "events", "ingest-1"))
}

// Where idem's store is the service's own PostgreSQL database, wrapped in a
// pgtx.Store, the handler writes its effect in the transaction of its hold
// on the event, which idem's record of the outcome commits: no run log is
// needed.
func ExampleConsumer_starterTransaction() {
	ctx := context.Background()
	pool, ps := openStore(ctx)
	defer pool.Close()
	store := pgtx.New(ps)
	eng := idem.New(store, idem.Policy{})
	defer eng.Close()

	conn, ch := channel()
	defer conn.Close()
	c := &trigamqp.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: "550e8400-e29b-41d4-a716-446655440000",
		Handler: func(ctx context.Context, d amqp091.Delivery) error {
			tx, err := store.Tx(ctx) // commits with the record; never commit it here
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO readings (body) VALUES ($1)`, d.Body)
			return err
		},
	}
	log.Fatal(c.Consume(ctx, ch, "events", "ingest-1"))
}

// openStore connects to the service's PostgreSQL database (DATABASE_URL)
// and returns its pool and idem's store in it, migrated.
func openStore(ctx context.Context) (*pgxpool.Pool, *postgres.Store) {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool, postgres.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return pool, store
}

// channel connects to RabbitMQ and opens a channel whose consumers are
// sent 16 deliveries ahead.
func channel() (*amqp091.Connection, *amqp091.Channel) {
	conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	ch.Qos(16, 0, false)
	return conn, ch
}
