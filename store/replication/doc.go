// Package replication describes how a shared store's server replicates
// and what a failover of it does to idem's promise (at most one run per
// key, every retry the first outcome). The PostgreSQL and Redis stores
// report it (Reporter) and check at start that a store's sync_replicas
// can be satisfied (ErrUnsatisfiable); the gateway logs the report in one
// line, exposes it as a metric and on its admin page.
//
// A failover promotes a replica. Whatever the primary had acknowledged and
// the replica had not received is gone: a completion (the key runs again
// once its reservation's lease ends, and a client that was answered may get
// another outcome) or a reservation (its holder runs, its retry finds
// nothing and runs too). A store that waits, before answering, for N
// replicas to have each write (sync_replicas=N) keeps the promise through
// a failover to any of them; one that does not may lose the writes of the
// last moments (docs/stores/POSTGRES.md, docs/stores/REDIS.md).
package replication
