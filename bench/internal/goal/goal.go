// Package goal lists the targets idem holds itself to in the load harness,
// and the duels that decide them. The runner runs the duels and the report
// judges the goals from this one list, so that a goal added here is both
// measured and shown.
package goal

import "slices"

// Ratio is a throughput goal: Contender's throughput over Baseline's, in
// Scenario, at least Min.
type Ratio struct {
	Contender, Baseline, Scenario string
	What                          string // "gateway on the embedded store"
	Min                           float64
}

// Ratios are the throughput goals, over the plain proxy: first calls and
// replays on the embedded store, and what a shared store may cost a
// gateway.
var Ratios = []Ratio{
	{"gw-file", "proxy", "first", "gateway on the embedded store", 0.9},
	{"gw-file", "proxy", "replay", "gateway on the embedded store", 2.5},
	{"gw-redis", "proxy", "first", "gateway on Redis", 0.85},
	{"gw-postgres", "proxy", "replay", "gateway on PostgreSQL", 1.0},
}

// Overhead is a goal between two middlewares: idem's over net/http costs
// no more throughput than the peer's over its own framework.
type Overhead struct {
	Scenario   string
	Idem, Peer Duel
}

// Overheads compare idem's middleware with gofiber's, each over its own
// bare framework.
var Overheads = []Overhead{
	{"first", Duel{"mw-memory", "upstream", "first"}, Duel{"fiber", "fiber-bare", "first"}},
	{"replay", Duel{"mw-memory", "upstream", "replay"}, Duel{"fiber", "fiber-bare", "replay"}},
}

// Comparisons are duels that decide no goal and are reported beside them:
// idem's middleware with what gofiber's leaves out left out too, so that
// the overhead goals can be read feature for feature.
var Comparisons = []Duel{
	{"mw-lean", "upstream", "first"},
	{"mw-lean", "upstream", "replay"},
}

// Duel is a contender run against its baseline at the same time, the load
// alternating between them.
type Duel struct {
	Contender, Baseline, Scenario string
}

// Duels returns the duels that decide the goals, each once, in the order
// of the goals, then the comparisons.
func Duels() []Duel {
	var out []Duel
	add := func(d Duel) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, r := range Ratios {
		add(Duel{r.Contender, r.Baseline, r.Scenario})
	}
	for _, o := range Overheads {
		add(o.Idem)
		add(o.Peer)
	}
	for _, d := range Comparisons {
		add(d)
	}
	return out
}
