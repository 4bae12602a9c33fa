// Package consume is what the broker consumers of trigger/nats and
// trigger/amqp share, so that they behave alike: starting a message's
// handler once under its event's key, deciding from the result whether the
// message is acked or redelivered and when (Run, Decide, HolderDelay),
// carrying that out and logging it (Consumer.Handle, through a Settler),
// and draining on shutdown (Drain). The adapters keep only what their
// broker needs: reading the event ID, and acking, nacking or holding a
// message.
package consume
