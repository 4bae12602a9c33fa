// Package nats runs a NATS JetStream consumer's handler once per event,
// across any number of consumer replicas sharing an idem store.
//
// JetStream delivers at least once: a message whose ack did not arrive
// within the consumer's AckWait, whose consumer died, or that was nak'ed is
// delivered again, possibly to another replica. Publishers' Nats-Msg-Id
// headers make JetStream drop duplicate publishes within the stream's
// duplicate window, but not duplicate deliveries. A Consumer starts the
// handler under trigger.EventKey(ActivityID, event ID) with a
// trigger.Starter, so a redelivered event whose run is recorded is acked
// without running again. It acks only after the outcome is recorded; an
// event whose run another replica still holds is nak'ed with a delay until
// that holder's lease ends, so if the holder was killed the event runs
// again (once) instead of being lost.
//
// # Effects exactly once
//
// Acking after the record makes each event start once, but a consumer that
// dies after its handler's effect and before idem's record of the outcome
// leaves the event in progress, and once its lease runs out the next
// delivery runs the handler again. A handler whose effect is written to
// PostgreSQL makes it happen once by committing it together with a mark of
// the event, in pgtx.RunLog.Once, keyed as the Consumer keys the event:
//
//	runs := pgtx.RunLog{Table: pgx.Identifier{"ingest_runs"}} // runs.Create makes it
//	c.Handler = func(ctx context.Context, msg jetstream.Msg) error {
//		id, err := nats.EventID(msg) // the Consumer's EventID, if it has one
//		if err != nil {
//			return err
//		}
//		return runs.Once(ctx, pool, trigger.EventKey(c.ActivityID, id), func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, `INSERT INTO readings (event_id, body) VALUES ($1, $2)`, id, msg.Data())
//			return err
//		})
//	}
//
// If the consumer dies before that transaction commits, neither the effect
// nor the mark remains, and the next delivery writes both. If it dies
// after, the next delivery finds the mark: Once returns
// trigger.ErrAlreadyStarted, which the handler returns, and the Consumer
// acks the message and records the event as handled. When idem's store is
// that same database (a pgtx.Store), the handler can instead write in the
// transaction of its hold, pgtx.Store.Tx(ctx), which commits with idem's
// record. An effect outside the database (a call to another service) needs
// that service to deduplicate by a key: the event key.
//
// # Stopping
//
// When Consume's context ends, the handlers running go on under a context
// that ends DrainTimeout later (30 s by default) and are acked as usual;
// messages delivered but not begun are nak'ed for another replica.
package nats
