// Package trigger runs event consumers and scheduled jobs once per trigger,
// the way the activity runner does with deterministic workflow IDs.
//
// A duplicate delivery of an event, or a duplicate fire of a schedule (two
// replicas, a restart, a retry), must not start the work twice. Each trigger
// gets a deterministic ID:
//
//	EventKey("550e8400-...", "evt_abc123")  = "activity-550e8400-...:evt_abc123"
//	SlotKey("550e8400-...", 09:00 UTC)      = "activity-550e8400-...:2026-03-01T09:00:00+00:00"
//	TaskKey(runID, "extract", 0)            = "task-<runID>:extract:0"
//
// and a Starter starts the work under that ID at most once: a second Start
// with the same ID returns ErrAlreadyStarted and runs nothing, like
// Temporal's REJECT_DUPLICATE. Starters share idem's stores, so any number
// of consumers or replicas can race.
//
// A Runner fires a cron schedule (robfig/cron syntax) through a Starter and
// applies a misfire policy when slots were missed because the runner was
// down or late: MisfireSkip, MisfireCatchUp (at most MaxCatchUp, oldest
// first) or MisfireCompress (one run whose window covers every missed slot).
// Replicas running the same schedule over one store run each slot once:
// slots are computed in the schedule's Location and keyed in UTC, "@every"
// slots are anchored to the Unix epoch, and what has run is read back from
// the store, so replicas in other time zones, replicas started apart, a
// store outage, a replica killed mid-slot and a restart of every replica
// neither run a slot twice nor lose one.
//
// This embedded runner is the default: it needs nothing but idem's store.
// Package trigger/temporal runs the same IDs and schedules on Temporal, and
// trigger/nats and trigger/amqp run broker consumers once per event.
package trigger
