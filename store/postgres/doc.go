// Package postgres is an idem store that keeps records in a PostgreSQL
// table, so that any number of processes and machines sharing the database
// keep idem's guarantee: of all concurrent first calls with one key, exactly
// one runs.
//
// # Setting up
//
// The store runs on a pgx connection pool that the application owns:
//
//	pool, err := pgxpool.New(ctx, "postgres://idem@db.internal/app")
//	if err != nil { ... }
//	defer pool.Close()
//
// The table is created by versioned migrations embedded in the binary.
// Run them once per deployment, with `idem migrate --store postgres://...`
// or from Go; they are idempotent and safe to run from several processes
// at once (an advisory lock serialises them), so running them at every
// start-up is fine too:
//
//	opts := postgres.Options{Schema: "idem"} // table idem.idem_records
//	if err := postgres.Migrate(ctx, pool, opts); err != nil { ... }
//
// Then make the store and hand it to the engine:
//
//	s, err := postgres.New(pool, opts)
//	if err != nil { ... }
//	eng := idem.New(s, idem.Policy{TTL: 24 * time.Hour})
//
// Closing the store makes its methods fail with store.ErrClosed; it leaves
// the pool open.
//
// # How it keeps the guarantee
//
// One row per key, whose primary key is the SHA-256 of scope and key, never
// the raw key. Reserve is one INSERT ... ON CONFLICT DO UPDATE statement
// that writes only when the key is absent, expired, or held by a stale
// lease of the same request: one round trip, no explicit transaction.
// Renew, Complete and Release are single statements guarded by the
// holder's token and the in_progress state, so a holder that lost its lease
// gets store.ErrLeaseLost and cannot overwrite its successor.
//
// Leases and expiry are judged on the database server's clock, never the
// callers' (store/doc.go, "One clock for a lease"): callers send the lease
// and the lifetime as durations, and every statement compares times with
// statement_timestamp(). Replicas whose clocks disagree by minutes then
// neither take over a live holder's key nor wait past a dead holder's
// lease. Run `idem migrate` before upgrading the replicas: this version
// refuses an unmigrated table, naming the fix.
//
// Cleanup deletes expired rows in short batches along an index on
// expires_at, skipping rows other transactions hold, so its cost follows
// the expired rows and it never blocks live traffic for long. Waiters of
// an engine whose policy waits are woken by LISTEN/NOTIFY, on one
// connection of the store's own.
//
// # Connection poolers
//
// pgx caches named prepared statements per connection (its default), so
// every call is one round trip. Behind a pooler in transaction mode that
// does not track prepared statements (PgBouncer before 1.21), set the
// pool's ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe,
// which uses no named statements and still takes one round trip. Such a
// pooler does not carry LISTEN either: point the pool's configuration at
// the server for it, or let waiters poll.
//
// The design in full (the table, the clock and the upgrade from rows that
// hold their writers' clocks, cleanup and its measurement, notifications
// that carry the record) is in docs/stores/POSTGRES.md.
package postgres
