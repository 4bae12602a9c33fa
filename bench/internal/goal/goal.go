// Package goal lists the targets idem holds itself to in the load harness,
// and the measurements that decide them. The runner runs the duels and the
// report judges the goals from this one list, so that a goal added here is
// both measured and shown.
package goal

import "slices"

// Ratio is a throughput goal: Contender's throughput over Baseline's, in
// the duel's scenario and at its clients, at least Min.
type Ratio struct {
	Duel
	What string // "gateway on the file store over the gateway on the memory store"
	Min  float64
}

// Ratios are the throughput goals: what durability costs the gateway
// (the file store against the memory store, at two loads; Pebble at 64
// clients), the same restated on the anchor that does the same durable
// work (what idem's own work costs above the least a durable proxy must
// do: one synced WAL append of the request's and the answer's bytes; the
// file store at both loads, Pebble at 64), and
// what replays gain over a plain proxy.
var Ratios = []Ratio{
	{Duel{"gw-file", "gw-memory", "first", 64}, "durability cost: gateway on the file store over the gateway on the memory store, 64 clients", 0.90},
	{Duel{"gw-file", "gw-memory", "first", 16}, "durability cost: gateway on the file store over the gateway on the memory store, 16 clients", 0.85},
	{Duel{"gw-pebble", "gw-memory", "first", 64}, "durability cost: gateway on the Pebble store over the gateway on the memory store, 64 clients", 0.85},
	{Duel{"gw-file", "durable-proxy-1", "first", 64}, "durability cost, restated on the fair anchor: gateway on the file store over the durable proxy with one synced Pebble WAL append a request, 64 clients", 0.95},
	{Duel{"gw-file", "durable-proxy-1", "first", 16}, "durability cost, restated on the fair anchor: gateway on the file store over the durable proxy with one synced Pebble WAL append a request, 16 clients", 0.95},
	{Duel{"gw-pebble", "durable-proxy-1", "first", 64}, "durability cost, restated on the fair anchor: gateway on the Pebble store over the durable proxy with one synced Pebble WAL append a request, 64 clients", 0.95},
	{Duel{"gw-file", "proxy", "replay", 0}, "gateway on the file store over the plain proxy", 2.5},
}

// Calls is a goal on idem's middleware against the same-stack reference
// (refmw), called in process, pair by pair: CPU and allocations per call
// at most the reference's plus MaxCPUMicros and MaxAllocs.
type Calls struct {
	Scenario     string
	MaxCPUMicros float64
	MaxAllocs    float64
}

// CallGoals are the middleware's goals, first calls and replays.
var CallGoals = []Calls{
	{"first", 2, 10},
	{"replay", 2, 10},
}

// Append is a goal of the file store's log at the store level against
// its floor, in store/file's BenchmarkAnchor: the sub-benchmark
// Contender's pairs per second over Baseline's, from Writers writers, at
// least Min.
type Append struct {
	Contender, Baseline string
	Writers             int
	Min                 float64
}

// AppendGoals: the store with OneSync (log1: one synced append a
// reserve+complete pair, the gateway's setting) against one synced
// append of the same bytes to Pebble's WAL (wal1), at 16 and 64 writers.
var AppendGoals = []Append{
	{"log1", "wal1", 16, 0.95},
	{"log1", "wal1", 64, 0.95},
}

// Footprint goals: the file store at FootprintKeys live keys.
const (
	FootprintKeys = 10_000_000
	// MaxBytesPerKey is the memory a live key may cost the file store.
	MaxBytesPerKey = 64
	// MaxRestartSeconds bounds a restart, after a Close and after a
	// kill -9.
	MaxRestartSeconds = 3
	// MaxChurnRatio bounds the log's size over its live data under
	// churn.
	MaxChurnRatio = 2
)

// Comparisons are duels that decide no goal and are reported beside them:
// the file store against the two-append durable proxy (the anchor before
// one sync a first call), the plain-proxy ratio of first calls, the
// shared stores (Redis with and without fsync), idem's middleware against
// the reference over HTTP, and gofiber's middleware over fiber.
var Comparisons = []Duel{
	{"gw-file", "durable-proxy", "first", 64},
	{"gw-file", "durable-proxy", "first", 16},
	{"gw-file", "proxy", "first", 0},
	{"gw-redis", "proxy", "first", 0},
	{"gw-redis-fsync", "durable-proxy", "first", 0},
	{"gw-postgres", "proxy", "replay", 0},
	{"mw-memory", "ref-mw", "first", 0},
	{"mw-memory", "ref-mw", "replay", 0},
	{"mw-memory", "upstream", "first", 0},
	{"fiber", "fiber-bare", "first", 0},
	{"mw-memory", "upstream", "replay", 0},
	{"fiber", "fiber-bare", "replay", 0},
}

// Duel is a contender run against its baseline at the same time, the load
// alternating between them, from Conns clients (0: the run's -c).
type Duel struct {
	Contender, Baseline, Scenario string
	Conns                         int
}

// Duels returns the duels to run, each once: the goals' in their order,
// then the comparisons.
func Duels() []Duel {
	var out []Duel
	add := func(d Duel) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, r := range Ratios {
		add(r.Duel)
	}
	for _, d := range Comparisons {
		add(d)
	}
	return out
}
