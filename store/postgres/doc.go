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
// # The table
//
// One row per key, whose primary key is the 32-byte SHA-256 of scope and
// key (store.HashKey), never the raw key, which is kept unindexed for
// inspection. The fencing token, a uint64, is kept in a bigint with the same
// bits. A second index on expires_at lets cleanup find expired rows without
// reading live ones. Migrations applied are listed in idem_schema_migrations
// in the same schema.
//
// # How it keeps the guarantee
//
// Reserve is one INSERT ... ON CONFLICT DO UPDATE statement that writes only
// when the key is absent, expired, or held by a stale lease of the same
// request, and returns the existing row otherwise: one round trip, no
// explicit transaction. Renew, Complete and Release are single statements
// guarded by the holder's token and the in_progress state, so a holder that
// lost its lease gets store.ErrLeaseLost and cannot overwrite its successor.
//
// # One clock: the server's
//
// Leases and expiry are judged on the database server's clock, never the
// callers' (store/doc.go, "One clock for a lease"): callers send the lease
// and the lifetime as durations, and every statement sets and compares
// times by statement_timestamp(), the time the server received it, which
// stays the same through the statement (so that what it judges, writes
// and returns agree) and, unlike now(), is not the start of a caller's
// transaction that CompleteTx runs in. A row comes back with the server's
// time in the same round trip, as Record.ReadAt, and LeaseLeft from it.
// Replicas whose clocks disagree by minutes then neither take over a live
// holder's key nor wait past a dead holder's lease.
//
// Rows written before this version hold their writers' clocks. Migration
// 0002 adds clock_token, which marks the rows whose times are the
// server's; the store judges the lease of any other in_progress row by
// watching it (store/internal/leasewatch): it is over once this process has
// seen the same token and lease_until, unchanged, for a whole lease of its
// own policy. A holder of the earlier version that still renews, whatever
// its clock, is never taken over; a dead one is taken over a lease after
// it was first seen. Upgrade by running `idem migrate` first (the column is
// nullable: the earlier version goes on working beside it), then the
// replicas; this version refuses an unmigrated table, naming the fix.
// Replicas of the earlier version still judge by their own clocks until
// they are replaced.
//
// # Cleanup
//
// Cleanup deletes expired rows in batches of Options.CleanupBatch (default
// 1000), each batch its own short transaction that walks the expires_at
// index and skips rows other transactions hold, so it never blocks live
// traffic for long and its cost follows the number of expired rows. On a
// shared 2-core machine it removed 1,000,000 expired rows among 1,000,000
// live ones in 6 to 17 seconds, no batch taking longer than half a second,
// with nobody waiting for its row locks. Run it from the gateway's
// background cleanup or `idem cleanup`; PostgreSQL's autovacuum then
// reclaims the space.
//
// # Waking waiters
//
// The store implements store.Notifier: an engine whose policy waits
// (idem.Policy.Wait) sends pg_notify on a channel named after the table
// when it ends a call, and each Store keeps one connection of its own
// (made with the pool's settings, not taken from it) that LISTENs on it,
// started by the first waiter and reconnected with backoff. Waiters in
// other processes are woken within a millisecond or so instead of polling.
// A pooler in transaction mode does not carry LISTEN: point the pool's
// configuration at the server, or let waiters poll.
//
// The notification carries the record the call ended with (the store is a
// store.RecordNotifier), so a woken waiter replays it without reading the
// table: after NOTIFY, no round trip is left to queue behind a busy pool.
// A record whose payload exceeds Options.NotifyRecordMax (default 7999
// bytes, PostgreSQL's limit; the value travels in base64) is announced by
// its key hash alone, and its waiters read it as before. A waiter that
// gets the record replays sooner than one that reads it, by about half at
// the median (TestWake; docs/bench/STORE-DESIGN.md).
// During a rolling upgrade, gateways of earlier versions do not recognise
// these notifications and their waiters poll (every 250 ms by default)
// until every gateway runs this version.
//
// # Connection poolers
//
// pgx caches named prepared statements per connection (its default), so
// every call is one round trip. Behind a pooler in transaction mode that
// does not track prepared statements (PgBouncer before 1.21), set the
// pool's ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe,
// which uses no named statements and still takes one round trip.
package postgres
