// Package pebblestore is an embedded on-disk store on Pebble (DSN
// pebble:PATH). It needs no server: records live in a directory that one
// process owns. The package is not named pebble, after its directory, so
// that it does not shadow the engine it imports.
//
// The default embedded store is store/file, a log with its index in memory,
// which costs less than half this store's CPU per call (docs/bench/STORES.md).
// This one keeps its index on disk: use it when the live keys do not fit in
// memory (store/file needs about 610 bytes of memory per live key), or to
// open a directory written by idem's first versions, whose file: store was
// this one.
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
// (group commit), so throughput grows with concurrency. With
// Options.OneSync (the gateway's setting) a reservation that may be taken
// over once stale (on_stale: retry) is kept in memory until its holder's
// Complete writes it with the outcome, in one synced commit: a first call
// makes one pass through Pebble's commit pipeline and waits for one sync.
// It is kept so for Options.HoldFor at most (50 ms by default): one held
// longer (a slow call) is committed and the WAL synced in the background,
// so that a process killed during a slow call leaves the key in progress,
// its outcome unknown, for an operator to find. A crash before either
// frees the key, as that policy would a lease later
// (docs/stores/FILE.md, "One synced append per first call", says the same
// of the file store). Each key's
// check-then-write runs under one of 1024 striped mutexes, and every write
// updates a record and its expiry-index entry in one batch, so Cleanup reads
// only the expired records.
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
// a jump of the wall clock while the store is open moves neither. A record
// left in progress by an earlier run of the process is free again within
// one lease of this Open, whatever the clock did.
//
// # A full disk
//
// A new reservation is refused, with an error matching store.ErrNoSpace,
// while the filesystem has less free than Options.Headroom (the gateway
// sets it from max_response_bytes; 1 MiB by default), read at most every
// 10 ms: no work starts whose outcome the store has no room to record.
// Replays, and outcomes of keys already reserved, are served and written.
//
// A write that fails for want of room fails its call with an error that
// matches store.ErrNoSpace; the store then refuses writes, keeps serving
// reads (replays included) from the engine reopened read-only, and writes
// again once the filesystem has room for its WAL written out as tables
// (up to about 64 MiB) and the headroom more. Writable reports which it is. An
// engine that a failed write left unable to close is replaced by a new
// one, without a restart. A write that failed is never read, not even by
// the engine it failed in, which holds it in memory: reads wait for the
// engine reopened from disk, so that no outcome whose write failed is
// ever replayed.
//
// The design in full (run numbers and the record formats, how the store
// survives Pebble's fatal errors on a full disk, the layout on disk) is in
// docs/stores/PEBBLE.md; why Pebble rather than bbolt, with measurements,
// in docs/bench/STORE-DESIGN.md.
package pebblestore
