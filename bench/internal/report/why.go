package report

import (
	"fmt"

	"github.com/idem-dev/idem/bench/internal/goal"
)

// why explains a goal not met: the cause the measurements and profiles
// point at, and what would close the gap. Keyed by the goal (its
// goal.Duel printed with %v, or a key of goals.go). The texts name no
// figure of a particular run: the table beside them has this run's.
var why = map[string]string{
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "gw-memory", Scenario: "first", Conns: 64}): durability,
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "gw-memory", Scenario: "first", Conns: 16}): durability +
		" At 16 clients at most 16 calls share a sync, and every call's latency holds one, so the sync's wall time bounds the throughput: the gap is wider there.",
	fmt.Sprint(goal.Duel{Contender: "gw-pebble", Baseline: "gw-memory", Scenario: "first", Conns: 64}):       pebbleDurability,
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "durable-proxy-1", Scenario: "first", Conns: 64}):   anchored,
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "durable-proxy-1", Scenario: "first", Conns: 16}):   anchored,
	fmt.Sprint(goal.Duel{Contender: "gw-pebble", Baseline: "durable-proxy-1", Scenario: "first", Conns: 64}): pebbleAnchored,
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "proxy", Scenario: "replay"}): "A replay is answered from the store (the index, then a pread of the stored frame) " +
		"without the upstream; the plain proxy pays the upstream's round trip. The gateway's gain is the CPU it spares (the + upstream column and its own), " +
		"and it weighs less when other work takes the cores: every process's CPU per request was several times its quiet value in this run " +
		"(compare the load average under Machine), and the same duel read 2.94x (IQR 2.88-3.02) at a load average of 2.4 on 2026-11-26. " +
		"To close: measure on a machine without other jobs; in the gateway, a replay's own cost is the HTTP server and the frame's read " +
		"(docs/bench/FILE-INDEX.md: a replay reads its whole frame, 7 allocations).",
	"calls first":  middleware,
	"calls replay": middleware + " A replay's own part is the same body, fingerprint, key hash and look-up, then the stored response decoded and written out, where the reference writes the buffer it kept.",
	keyMemory: "The index keeps a 40-byte entry, a 4-byte slot in a per-stripe table kept at most 3/4 full, and one or two 4-byte expiry items per key " +
		"(docs/bench/FILE-INDEX.md); RSS also counts the allocator's slack. To close: a denser table (7/8 full) or expiry buckets by minute.",
	keyRestart: "A restart after a Close reads the snapshot written at Close; after a kill -9 it reads the last snapshot written in the background " +
		"(on a rotation of the log, or by Cleanup) and replays the log written since, which may reach twice a snapshot's size before a new snapshot is due " +
		"(here a tenth more keys after the Close's snapshot). The replay runs on one core at about 2.2-2.7 s a GB (docs/bench/FILE-INDEX.md). " +
		"To close: a snapshot due after one snapshot's size of log, not two (about 3.2 s at 10^7 keys, at the price of writing as many snapshot bytes as log bytes), " +
		"and the log since the snapshot replayed by segment on both cores. A loaded machine lengthens every restart: after a Close at 10^7 keys, " +
		"2.00-2.53 s on 2026-11-27 09:15-10:05 (docs/bench/FILE-INDEX.md), against this run's figure at its load average.",
	"append 16": appendFloor + " At 16 writers fewer pairs share a sync than at 64, so each sync's wall time weighs more on both sides and the ratio moves more from run to run.",
	"append 64": appendFloor,
	keyChurn: "The log moves to a new segment past an eighth of its live data (at least 1 MiB), and reclaim brings it back to 1.6 times its live data " +
		"at each move and at each Cleanup; between two, new frames and records expiring (which count as live until the next sweep) move the ratio " +
		"by up to an eighth of the live data each, a quarter while little is live. Writers stalled for a good part of a TTL (a machine loaded " +
		"far past its cores) let records expire with no write, so with no move and no sweep: the ratio then follows the stall. To close: a sweep " +
		"on a timer as well as at each move (docs/stores/FILE.md).",
}

const durability = "This goal compares unlike work: the memory store writes nothing to disk, and on the file store a first call waits for " +
	"an fdatasync of its outcome before the answer, which the contract requires (its reservation is written without waiting and made durable by " +
	"that same sync: Options.OneSync, the gateway's setting). The fair anchor is the durable proxy with one synced append of the request's and " +
	"the answer's bytes and nothing else; the gateway on the file store is compared with it, at the same two loads, in the goals below, and the " +
	"store's log with the same floor at the store level. The group commit shares each sync among the calls waiting, but a durable append costs " +
	"the kernel 74-142 µs of CPU and twice that in wall time on this machine (docs/bench/FILE-LOG.md). To close this one as written: larger " +
	"groups (more calls per sync) or a cheaper sync (O_DIRECT|O_DSYNC of whole blocks measured about 8% less CPU a sync and was not taken: it " +
	"makes a stored response's first replay a disk read)."

const pebbleDurability = "This goal compares unlike work, as the file store's does: the memory store writes nothing to disk; the goal on " +
	"the fair anchor (the one-append durable proxy) is below. On the Pebble store a first call holds its reservation in memory (under " +
	"on_stale: retry, the default, with Options.OneSync, the gateway's setting) and commits it with its outcome in one synced batch: one WAL " +
	"sync a call, shared among concurrent commits by Pebble's commit pipeline, where the memory store writes nothing. Above the file store's " +
	"cost, each call reads an absent key through Pebble's memtables and tables, inserts its record and expiry entry in the memtable, and " +
	"Pebble flushes and compacts memtables in the background, on the same two cores. Compare the gateway on the file store in this run's " +
	"table: the gap between the two is Pebble's own. To close: see the goal on the fair anchor below (docs/bench/PEBBLE.md)."

const anchored = "The anchor does one synced append of the request's and the answer's bytes and nothing else (the floor of a first call " +
	"that syncs once); what the gateway adds is its index, the fingerprint, the lease, the reservation's own unsynced write and the stored " +
	"response. See the duel's + CPU µs/req: that is what to cut, profiled with bench/profile.sh file: first. The duels against the two-append " +
	"proxy (in the duel table) show the same gateway against the anchor before one sync a first call."

const pebbleAnchored = "The anchor makes one synced append to Pebble's WAL a request; the gateway on the Pebble store makes one commit " +
	"a first call too (OneSync holds the reservation in memory until the outcome is written with it), but first reads the key, which is " +
	"not there: a seek in each memtable's skiplist and a probe of every table's Bloom filter, the larger part of what it adds. Then the " +
	"memtable insert of the record and its expiry entry, which the anchor's WAL-only append skips, and the flushes and compactions that " +
	"follow, on the same two cores. See the duel's + CPU µs/req, profiled with bench/profile.sh pebble:/tmp/idem-pebble first " +
	"(docs/bench/PEBBLE.md). To close: a cheaper answer to \"is this key new\" than Pebble's Get (an in-memory filter of the keys " +
	"the store holds, at the memory the file store's index costs), or the file store, whose index is in memory."

const appendFloor = "log1 writes a pair as two frames, the reservation's buffered and indexed without a sync and the completion's synced by the " +
	"group commit; wal1 hands Pebble one buffer of the same bytes to sync. Above the sync, the log encodes two records, writes twice, " +
	"looks each key up and indexes it under its stripe's lock; on two cores that CPU sets the rate once enough writers share a sync (compare " +
	"the CPU µs a pair beside the ratio, and docs/bench/FILE-LOG.md). To close: less CPU a pair in the log, located with " +
	"go test -run '^$' -bench 'Anchor/c64/log1$' -cpuprofile on store/file; a loaded machine (see Machine) widens the interquartile range " +
	"more than it moves the median."

const middleware = "The reference keeps a SHA-256 of the raw body in a sync.Map entry and the handler's buffer; idem's middleware also " +
	"canonicalises the JSON before hashing and hashes the key with its tenant, writes a store record with a fencing token, a lease and an expiry " +
	"(the memory store's packed record and expiry index), gives the handler its own copy of the request with the request ID, reads the body under a " +
	"deadline and encodes the response into the stored value; the profile in BENCHMARKS.md's Profile section prices each part " +
	"(docs/bench/MIDDLEWARE.md has each cut and what it saved). A loaded machine (see Machine) multiplies every CPU figure, the reference's too, " +
	"so compare the two sides' CPU in the same run. To close: the response kept as the handler wrote it rather than encoded, the request copy " +
	"made only when the handler asks for the token."
