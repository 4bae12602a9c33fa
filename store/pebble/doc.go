// Package pebblestore is an embedded on-disk store on Pebble (DSN
// pebble:PATH). It needs no server: records live in a directory that one
// process owns. The package is not named pebble, after its directory, so
// that it does not shadow the engine it imports.
//
// The default embedded store is store/file, a log with its index in memory,
// which costs less than half this store's CPU per call (figures in its
// package doc). This one keeps its index on disk: use it when the live keys
// do not fit in memory (store/file needs about 610 bytes of memory per
// live key), or to open a directory written by idem's first versions, whose
// file: store was this one.
//
//	s, err := pebblestore.Open("./idem-data", pebblestore.Options{})
//	if errors.Is(err, pebblestore.ErrLocked) {
//		// another process (say, a second gateway) has the directory open
//	}
//	defer s.Close()
//	eng := idem.New(s, policy)
//
// # Guarantees
//
// Reserve, Complete, Renew and Release return only once their write is on
// disk (fsync'd): after a crash or kill -9, every call that returned is
// there, and a call that did not return is either entirely there or not at
// all. Writes of different keys that overlap in time share their fsyncs
// (group commit), so throughput grows with concurrency.
//
// One process at a time: Open takes an exclusive lock on idem.lock in the
// directory and fails with ErrLocked while another process (or another Store
// in this one) holds it. The kernel drops the lock when the holder exits,
// however it exits. Processes that must share records across machines use
// the PostgreSQL, Redis or S3 stores instead.
//
// # One clock
//
// Leases and lifetimes are judged on the store's own clock (store/doc.go,
// "One clock for a lease"): the wall clock read once, when Open starts
// (Options.WallClock), and carried forward on the monotonic clock, so that
// a jump of the wall clock while the store is open moves neither. A
// restart reads the wall clock again: lifetimes written before a jump
// move with it. Each Open draws a run number that every record it writes
// carries, with the length of its lease (record format 2): a record in
// progress of another run was left by a holder that died with it, and is
// read with its lease held to at most that length from this Open, so its
// key is free again within one lease whatever the clock did. Records
// written before (format 1) have no run, and read their lease as
// LeaseUntil - UpdatedAt.
//
// # A full disk
//
// Pebble (v1.1) treats a failed write of its WAL or MANIFEST as fatal: it
// calls its logger's Fatalf, whose default exits the process, and its WAL
// stays failed for the rest of the engine's life. The store's logger does
// not exit: in a call of the store's own, Fatalf panics and the store
// turns the panic into that call's error (it must not return there, or
// Pebble would report the failed commit as done); in Pebble's background
// jobs it tells the store and returns. A failed commit fails its call
// with an error that matches store.ErrNoSpace when the disk is full, and
// the store then:
//
//   - refuses every write at once with that error;
//   - reopens the engine read-only (a replay of the WAL: calls wait for
//     it), and serves reads from it, replays of acknowledged keys
//     included;
//   - checks every 100 ms whether the filesystem has room for the records
//     of its WAL written out as tables, and 1 MiB more, and reopens the
//     engine read-write then, which writes them (after a failed try it
//     waits twice as long as before, up to 10 s). Writable reports which
//     it is.
//
// A commit that failed may still have reached the WAL whole (Pebble
// writes the batches of a group together and fails them together): after
// a reopen it may be there, as the store contract allows of a failed
// call.
//
// Open on a full disk cannot open Pebble read-write, whose replay of the
// WAL writes tables: it opens it read-only instead, and reopens it
// read-write as above. Pebble leaves behind the tables that a failed open
// wrote, which fill the disk again; the store removes them (unless the
// MANIFEST changed) and stops the goroutine that Pebble's failed open
// leaves running. A new directory cannot be created on a full disk: Open
// fails.
//
// The room needed to write again is the point to know: with its 32 MiB
// memtables, the store's WAL holds everything written since its last
// flush, up to about 64 MiB, and reopening read-write needs that much room
// again. On a disk smaller than that, the memtables never fill, the WAL
// holds all the store's data, and the store writes again only once about
// as much room as its data is free. The file store (store/file) needs
// none: it writes again as soon as one write fits.
//
// # Layout
//
// The directory is a Pebble database (github.com/cockroachdb/pebble, the
// LSM engine of CockroachDB) with three tables:
//
//	r/<keyhash>                     the record
//	x/<expiresAt>/<keyhash>         the expiry index (12-byte, time-ordered)
//	m/format                        the on-disk format version
//
// Memory: up to two 32 MiB memtables (so that a 4 MiB stored response does
// not force a flush) plus Options.CacheSize.
//
// Records are indexed by store.HashKey, never by the raw key. Every write
// updates a record and its expiry entry in one atomic batch, so Cleanup walks
// the index from its start up to now and reads only the entries that are due:
// its cost grows with the expired records, not the live ones.
//
// Pebble has no transactions, so each key's check-then-write runs under one
// of 1024 striped mutexes, held until the write is durable (see Store.stripe
// for why not one mutex). Get takes the stripe too, so a reader never sees a
// write that a crash could still undo.
//
// # Why Pebble
//
// Pebble's commit pipeline groups concurrent synced commits with no delay
// and no tuning, and its log-structured writes do not care about key
// order. bbolt, the other candidate, groups commits only through db.Batch,
// which waits for a batch to fill (a lone caller pays the whole delay), and
// its copy-on-write B+tree rewrites pages all over the file for keys that
// arrive in random order. The store adds no measurable cost over the bare
// engine: both are bound by fsync and compaction. The measurements
// (raw_bench_test.go, BenchmarkPairs) are in docs/bench/STORE-DESIGN.md.
package pebblestore
