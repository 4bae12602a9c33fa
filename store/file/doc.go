// Package file is idem's embedded on-disk store, the gateway's default
// (DSN file:PATH). It needs no server: records live in a directory that one
// process owns.
//
//	s, err := file.Open("/var/lib/idem", file.Options{})
//	if errors.Is(err, file.ErrLocked) {
//		// another process (say, a second gateway) has the directory open
//	}
//	defer s.Close()
//	eng := idem.New(s, policy)
//
// # Guarantees
//
// Reserve, Complete, Renew and Release return only once their write is on
// disk (fdatasync'd): after a crash or kill -9, every call that returned is
// there, and a call that did not return is either entirely there or not at
// all (TestCrash kills a writing child 24 times and checks every key).
// Writes that overlap in time share one fsync (group commit), so
// throughput grows with concurrency and no writer waits on a timer. With
// Options.OneSync (the gateway's setting) a reservation that may be taken
// over once stale (on_stale: retry) returns before its sync, and is
// durable once its holder's Complete returns, whose frame holds the whole
// record: a first call writes one frame and waits for one fsync. A
// reservation of a new key is kept in memory for Options.HoldFor at most
// (50 ms by default): one held longer (a slow call) is written without
// its holder waiting, so that a process killed during a slow call leaves
// the key in progress, its outcome unknown, for an operator to find. A
// crash before either frees the key, as that policy would a lease later;
// docs/stores/FILE.md says what a crash does under each policy.
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
// move with it (an hour back, records live an hour longer). A record left
// in progress by a process that died has its lease held, at recovery, to
// at most its length from the reopen: its key is free again within one
// lease, whatever the clock did. Records keep the length of their lease
// for this (record format 2); those written before (format 1) read it as
// LeaseUntil - UpdatedAt.
//
// # A full disk
//
// A new reservation is refused, with an error matching store.ErrNoSpace,
// while the filesystem has less free than Options.Headroom (the gateway
// sets it from max_response_bytes; 1 MiB by default): no work starts
// whose outcome the store has no room to record. The check reads the
// free room at most every 10 ms (a cached statfs, less what the log
// appended since), so it costs a first call next to nothing. Replays,
// and the outcomes of keys already reserved, are served and written; the
// headroom is for one outcome, and keys in flight together share it.
//
// A write that fails (a full disk, a quota, an I/O error: any error of the
// write or of its fdatasync) fails the calls whose frames it carried, and
// those appended behind it, with an error that matches store.ErrNoSpace
// when the disk is full; it does not fail the store. The log cuts its
// file back to where the failed write began (truncated and synced, so
// that no part of it is read again, by this process or by a reopen), the
// index is put back as it was, and reads go on: replays of acknowledged
// keys work while the disk is full. New reservations are then refused at
// once, with the same error, except for one try every 100 ms once the
// filesystem reports the headroom free; Complete, Renew and Release still try,
// as the outcome of work already under way may fit. The first write that
// succeeds with the headroom free makes the store writable again, without a
// restart (a small frame fits in the last kilobytes of a disk still full
// for any response). Writable
// tells the gateway's readiness check which it is. While the log cannot
// write, Cleanup drops the segments no record lives in, which frees room,
// and compacts none. Open writes nothing but the cut of a torn tail (a
// segment's file is created by the first write to it), so the store
// opens on a full disk and serves what it holds. Should the cut itself
// fail, the log no longer knows what its tail holds and refuses every
// write until the store is opened again.
//
// # Design
//
// The store is log-structured, in the manner of Bitcask: every write
// appends one checksummed frame (the whole record, or a delete) to the
// active segment file, and an index in memory of 40 bytes a key, with no
// pointers for the garbage collector to scan, maps each key hash to where
// its latest frame lies. A reservation of a new key reads nothing from
// the disk; a replay reads its frame with one pread. Expiry costs no
// write. Cleanup, and the log's move to a new segment, reclaim disk a
// segment at a time, oldest first, so that the log stays within twice
// its live data; Close, Cleanup and the move to a new segment write index
// snapshots (hint files), so that a restart reads a snapshot and the
// log's tail rather than the whole log. docs/stores/FILE.md describes the
// layout, recovery and snapshots.
//
// # Why a log of our own, not Pebble
//
// An idempotency store needs a point lookup and a durable append, none of
// what an LSM is for (range scans, sorted keys, data larger than memory).
// idem's first embedded store ran on Pebble, and its read before every
// reservation and two synced commits through the memtable and WAL were the
// largest cost of a gateway's first call; this log needs about a quarter of
// Pebble's CPU per reserve+complete pair under load. What was measured, and
// what was measured and not taken (O_DSYNC, O_DIRECT, longer group
// windows), is in docs/bench/FILE-LOG.md.
package file
