// Package diskroom admits new work on an embedded store (store/file,
// store/pebble) only while the store's filesystem has room to record the
// outcome that work may end with.
//
// A store that finds its disk full only when a write fails has already
// let work start whose outcome it may not be able to keep: the
// reservation fits in the last kilobytes, the response does not. A Gate
// refuses a new reservation while the room left is below a headroom (the
// gateway's max_response_bytes and what a record holds besides), with an
// error matching store.ErrNoSpace and syscall.ENOSPC, as a full disk
// would. Replays, and the outcomes of work already under way, are not
// asked.
//
// The check must cost next to nothing on every first call: a Gate reads
// the filesystem's free room (statfs) at most once per interval, and in
// between takes away from that reading what the store told it it wrote.
//
// The headroom is for one outcome. Keys in flight together share it: if
// their outcomes together do not fit, the ones that fail are kept in
// memory by the engine, which renews their leases and writes them once
// there is room (kept.go at the repository's root).
package diskroom
