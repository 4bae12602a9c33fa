package nats_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
	"github.com/idem-dev/idem/trigger"
	trignats "github.com/idem-dev/idem/trigger/nats"
)

// Each replica of an ingest service runs this; the replicas share idem's
// store, so each event runs once between them. The handler writes the
// event's effect with pgtx.RunLog.Once: the effect and the event's mark in
// the run log commit in one transaction, so that a replica killed between
// the effect and idem's record of it cannot make it happen twice. The next
// delivery finds the mark, Once returns trigger.ErrAlreadyStarted, and the
// Consumer acks the message.
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

	nc, cons := ingestConsumer(ctx)
	defer nc.Close()
	const activity = "550e8400-e29b-41d4-a716-446655440000"
	c := &trignats.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: activity,
		Handler: func(ctx context.Context, msg jetstream.Msg) error {
			id, err := trignats.EventID(msg)
			if err != nil {
				return err
			}
			return runs.Once(ctx, pool, trigger.EventKey(activity, id), func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO readings (event_id, body) VALUES ($1, $2)`, id, msg.Data())
				return err
			})
		},
	}
	log.Fatal(c.Consume(ctx, cons))
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

	nc, cons := ingestConsumer(ctx)
	defer nc.Close()
	c := &trignats.Consumer{
		Starter:    &trigger.Starter{Engine: eng, Scope: "events"},
		ActivityID: "550e8400-e29b-41d4-a716-446655440000",
		Handler: func(ctx context.Context, msg jetstream.Msg) error {
			tx, err := store.Tx(ctx) // commits with the record; never commit it here
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO readings (body) VALUES ($1)`, msg.Data())
			return err
		},
	}
	log.Fatal(c.Consume(ctx, cons))
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

// ingestConsumer connects to NATS and returns the durable consumer
// "ingest" of the stream EVENTS.
func ingestConsumer(ctx context.Context) (*natsgo.Conn, jetstream.Consumer) {
	nc, err := natsgo.Connect(natsgo.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "EVENTS", "ingest")
	if err != nil {
		log.Fatal(err)
	}
	return nc, cons
}
