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
		" At 16 clients at most 16 calls share a sync, and a call's latency holds two of them, so the sync's wall time bounds the throughput: the gap is wider there.",
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "durable-proxy", Scenario: "first", Conns: 64}): anchored,
	fmt.Sprint(goal.Duel{Contender: "gw-file", Baseline: "durable-proxy", Scenario: "first", Conns: 16}): anchored,
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
	keyChurn: "The log moves to a new segment past an eighth of its live data (at least 1 MiB), and reclaim brings it back to 1.6 times its live data " +
		"at each move and at each Cleanup; between two, new frames and records expiring (which count as live until the next sweep) move the ratio " +
		"by up to an eighth of the live data each, a quarter while little is live. Writers stalled for a good part of a TTL (a machine loaded " +
		"far past its cores) let records expire with no write, so with no move and no sweep: the ratio then follows the stall. To close: a sweep " +
		"on a timer as well as at each move (docs/stores/FILE.md).",
}

const durability = "This goal compares unlike work: the memory store writes nothing to disk, and on the file store a first call waits for " +
	"two fdatasyncs (the reservation before the upstream runs, the outcome before the answer), which the contract requires. The fair anchor is " +
	"the durable proxy, which makes the same two synced appends and nothing else; the gateway on the file store is compared with it, at the same " +
	"two loads, in the goals below. The group commit shares each sync among the calls waiting, but a durable append costs the kernel 74-142 µs of CPU and twice that in " +
	"wall time on this machine (docs/bench/FILE-LOG.md). To close this one as written: larger groups (more calls per sync) or a cheaper sync " +
	"(O_DIRECT|O_DSYNC of whole blocks measured about 8% less CPU a sync and was not taken: it makes a stored response's first replay a disk read). " +
	"Proposed instead: the gateway on the file store at 0.95x or more of the durable proxy, at 16 and at 64 clients."

const anchored = "The anchor does the two synced appends and nothing else; " +
	"what the gateway adds is its index, the fingerprint, the lease and the stored response. See the duel's + CPU µs/req: that is what to cut, " +
	"profiled with bench/profile.sh file: first."

const middleware = "The reference keeps a SHA-256 of the raw body in a sync.Map entry and the handler's buffer; idem's middleware also " +
	"canonicalises the JSON before hashing and hashes the key with its tenant, writes a store record with a fencing token, a lease and an expiry " +
	"(the memory store's packed record and expiry index), gives the handler its own copy of the request with the request ID, reads the body under a " +
	"deadline and encodes the response into the stored value; the profile in BENCHMARKS.md's Profile section prices each part. Allocations are within " +
	"the goal; CPU is near it, and this run's machine (see Machine) multiplied every CPU figure, the reference's too, several times over its quiet value. " +
	"To close: the response kept as the handler wrote it rather than encoded, the request copy made only when the handler asks for the token."
