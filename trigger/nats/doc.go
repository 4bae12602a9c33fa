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
package nats
