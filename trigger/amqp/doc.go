// Package amqp runs a RabbitMQ (AMQP 0-9-1) consumer's handler once per
// event, across any number of consumer replicas sharing an idem store.
//
// RabbitMQ redelivers every delivery that was not acked when its channel or
// connection closes (a consumer that crashed, was killed, or lost its
// network) and every delivery that was nack'ed with requeue. A Consumer
// starts the handler under trigger.EventKey(ActivityID, event ID) with a
// trigger.Starter, so a redelivered event whose run is recorded is acked
// without running again. It acks only after the outcome is recorded; an
// event whose run another replica still holds is held until that holder's
// lease ends (at most MaxHold) and requeued, so if the holder was killed
// the event runs again (once) instead of being lost.
//
// Publishers give each event a stable ID in the message's MessageId
// property (or the Consumer's EventID says where to find one).
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
//	c.Handler = func(ctx context.Context, d amqp091.Delivery) error {
//		key := trigger.EventKey(c.ActivityID, d.MessageId) // the Consumer's EventID, if it has one
//		return runs.Once(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, `INSERT INTO readings (event_id, body) VALUES ($1, $2)`, d.MessageId, d.Body)
//			return err
//		})
//	}
//
// If the consumer dies before that transaction commits, neither the effect
// nor the mark remains, and the next delivery writes both. If it dies
// after, the next delivery finds the mark: Once returns
// trigger.ErrAlreadyStarted, which the handler returns, and the Consumer
// acks the delivery and records the event as handled. When idem's store is
// that same database (a pgtx.Store), the handler can instead write in the
// transaction of its hold, pgtx.Store.Tx(ctx), which commits with idem's
// record. An effect outside the database (a call to another service) needs
// that service to deduplicate by a key: the event key.
//
// # Stopping
//
// When Consume's context ends, the handler running goes on under a context
// that ends DrainTimeout later (30 s by default) and is acked as usual;
// then the consumer is canceled at the broker and the deliveries it was
// sent but had not begun are requeued for other replicas.
package amqp
