// Package chaos is idem's fault suite, in the manner of Jepsen and Elle but
// small: clients retry keyed calls through real gateways while nemeses kill
// (kill -9) and pause (SIGSTOP past the lease) the gateways and an upstream
// answers slowly, resets connections or cuts its responses mid-body. Every
// client attempt and every execution the upstream saw is recorded in a
// History, and Check judges that history against what idem promises:
//
//   - a key runs again only when its holder died or its lease ran out (it was
//     killed, or paused past its lease), or when the first run's outcome was
//     unknown and the route's on_unknown policy is release;
//   - an acknowledged outcome (a 2xx a client saw) is never answered
//     differently afterwards: replays are byte-identical in status and body;
//   - no acknowledgement without an execution that produced it.
//
// A 504 upstream_timeout or a 409 outcome_unknown is not an acknowledgement:
// it tells the client the call may have run, not what it answered.
//
// A key may run again when its holder died or its lease ran out: killed, or
// paused (SIGSTOP) past its lease by a nemesis, or stalled past it by the
// machine itself (CPU starvation, a long GC), which a watchdog sees as a
// health probe answered late and records as a stall. The report counts
// stalls apart from the nemesis's pauses, so that a run explained by the
// machine rather than by the nemesis shows.
//
// The package holds the history model and its checker (history.go,
// check.go), the counting upstream with its faults (upstream.go), the
// retrying clients (client.go), and the nemesis and the watchdog (run.go).
// The gateways themselves are processes started by the caller behind the
// Cluster interface; cmd/idem's TestChaos runs them on PostgreSQL, Redis
// and the file store.
package chaos
