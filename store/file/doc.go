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
// throughput grows with concurrency and no writer waits on a timer.
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
// A write that fails (a full disk, a quota, an I/O error: any error of the
// write or of its fdatasync) fails the calls whose frames it carried, and
// those appended behind it, with an error that matches store.ErrNoSpace
// when the disk is full; it does not fail the store. The log cuts its
// file back to where the failed write began (truncated and synced, so
// that no part of it is read again, by this process or by a reopen), the
// index is put back as it was, and reads go on: replays of acknowledged
// keys work while the disk is full. New reservations are then refused at
// once, with the same error, except for one try every 100 ms once the
// filesystem reports 1 MiB free; Complete, Renew and Release still try,
// as the outcome of work already under way may fit. The first write that
// succeeds with 1 MiB free makes the store writable again, without a
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
// # Design: a log with an index in memory
//
// The store is log-structured, in the manner of Bitcask, which suits
// records that expire unusually well. Every write appends one checksummed
// entry (the whole record, or a delete) to the active segment file; an
// index in memory maps each key hash to its record's metadata and to where
// its latest entry lies. A reservation of a new key reads nothing: it looks
// the key up in memory, appends, and waits for the shared fsync. A replay
// reads the record and its stored response with one pread. Recovery loads
// the index snapshot, if one checks, then replays the segments written
// since it began (all of them without one), keeping each key's entry with
// the highest sequence number, and cuts the log at the first torn entry of
// its tail (a write that was never acknowledged); damage anywhere else in
// what it replays fails Open with ErrCorrupt.
//
// Segment files are allocated 4 MiB ahead of their writes, so the fsync
// after an append flushes data without committing a new file size through
// the filesystem's journal, which would cost half as much CPU again a sync
// (docs/bench/FILE-LOG.md). Recovery reads the
// zeros after the last entry as the segment's end, and cuts a tail that
// has entries after a gap (pages of an unacknowledged write reach the disk
// in any order), so they can never be read later. Zeros are written only
// while the filesystem keeps 8 MiB free beyond them, so preallocation
// never takes the room the frames need; a piece that fails for want of
// room all the same gives back what it took.
//
// Expiry costs no write: an expired record replayed after a crash is still
// expired. Cleanup takes the due items of an in-memory index of expiry
// times, bucketed by second, so its cost grows with the expired records,
// not the live ones. A write that moves a record's expiry to another
// second appends an item to that second's bucket (cheaper than an ordered
// B-tree's insert and delete, docs/bench/FILE-LOG.md); an item
// of an earlier write or a released key is skipped once when its time
// comes.
// Disk is reclaimed a segment at a time, oldest first: a segment no record
// lives in is deleted; one that is mostly dead, or a log grown past twice
// its live data, has its live entries copied to the head of the log first,
// segment after segment until the log, every segment counted, is back
// within twice its live data. Removing only the oldest segment means a
// delete entry never outlives an older entry of its key, so a released
// key never comes back. Cleanup does it, and so does the log's move to a
// new segment, in the background, after removing the records expired by
// then: the log stays within twice its live data at the pace of the
// writes, however long the interval between Cleanups (the gateway's is
// minutes, a TTL may be seconds). The segment being written cannot be
// compacted: live data smaller than a segment or two (64 MiB each by
// default) leaves the log above the bound.
//
// # The index: 40 bytes a key
//
// The index keeps, per live key, what a write decides on without reading
// the disk, in a fixed 40-byte entry with no pointer: 96 bits of the key
// hash (its first byte picks one of 256 stripes, the next eleven are the
// entry's tag), the state, the expiry and the lease's end in nanoseconds,
// and where the key's latest frame lies (segment, offset, length).
// Entries sit in chunks of 256 and never move; an open-addressing table
// of 4-byte slot numbers per stripe, probed linearly and kept at most 3/4
// full, finds a key's entry by its tag; each place holds the tag's last
// byte beside the slot number, so that a probe reads another key's entry
// once in 256 places rather than at each. The expiry index holds 4-byte
// slot references in buckets of one second. Everything else (scope, key,
// fingerprint, binding, token, request ID, the stored response) is read
// back from the frame with one pread, which the page cache makes a copy
// from memory as a rule; the read checks the frame's checksum and its
// whole key hash, so two keys that share the tag (a chance of about one
// in 10^15 among ten million keys) fail with ErrCorrupt rather than
// answer for each other. Reserve of a new key reads nothing from the
// disk; a replay, Get, Renew, Complete and Release read their frame.
//
// The garbage collector has nothing in the index to scan.
// docs/bench/FILE-INDEX.md has the memory per key and the restart times,
// measured with bench/cmd/filescale.
//
// # Restart: index snapshots
//
// Close writes the index to index.snap (a hint file, as Bitcask writes
// them; snapshot.go), and so do Cleanup and, in the background, the log's
// move to a new segment, once the log written since the last snapshot is
// a snapshot's size: snapshots then add at most the log's own bytes to
// the disk's writes, and a restart after a kill reads at most about one
// snapshot's worth of log. A snapshot holds 41 bytes per key, the
// segment that was active when it began, and the sizes of the segments
// before it. Open loads it and replays only that segment and the later
// ones: a restart reads the snapshot and the log's tail, not the whole
// log. The segments to replay are read and decoded, several at a time,
// on goroutines of their own while the snapshot loads; their frames go
// into the index oldest segment first, and a key's frame with the highest
// seq wins (a delete included, over an older put), whatever order the
// segments decoded in. Both the snapshot's entries and the replayed
// frames go into the index from several goroutines, each with stripes
// of its own, so that a restart after a kill, with a tail
// to replay, costs little more than one after Close. The snapshot is
// taken while the store runs, a stripe at a time, and holds only entries
// whose frames lie before its first segment; any frame written since is
// in the replayed segments and wins. It is
// written to a temporary file, synced and renamed; one that is torn,
// fails its checksums or does not match the segments on disk is ignored,
// and the whole log is replayed as before. Damage to a sealed segment,
// which Open then no longer reads, is found by the read of the frame.
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
