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
package amqp
