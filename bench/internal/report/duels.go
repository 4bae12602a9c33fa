package report

import (
	"fmt"
	"math"

	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/results"
)

// findDuel returns the duel of g, or nil when none ran or none of its
// pairs has a ratio. A duel at 0 clients is at the run's -c.
func findDuel(doc *results.Doc, g goal.Duel) *results.Duel {
	conns := func(c int) int {
		if c == 0 {
			return doc.Config.Connections
		}
		return c
	}
	for i, d := range doc.Duels {
		if d.Contender == g.Contender && d.Baseline == g.Baseline && d.Scenario == g.Scenario && conns(d.Conns) == conns(g.Conns) && len(d.Ratios()) > 0 {
			return &doc.Duels[i]
		}
	}
	return nil
}

// duelFigure is how a goal cell shows a duel: "0.93x (median of 10
// interleaved pairs, IQR 0.90-0.95; +12 CPU µs/req)".
func duelFigure(d *results.Duel) string {
	r, cpu := results.Summarize(d.Ratios()), results.Summarize(d.CPUDiffs())
	return fmt.Sprintf("%.2fx (median of %d interleaved pairs, IQR %.2f-%.2f; %s CPU µs/req)", r.Median, r.N, r.Q1, r.Q3, signed(cpu.Median))
}

// sliceMedian is the median over d's pairs of one side's figure.
func sliceMedian(d results.Duel, f func(results.Pair) float64) float64 {
	xs := make([]float64, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		xs = append(xs, f(p))
	}
	return results.Summarize(xs).Median
}

// writeDuels lists every duel: the figures the goals are decided on, with
// each side's CPU per request.
func writeDuels(w func(string, ...any), doc *results.Doc) {
	if len(doc.Duels) == 0 {
		return
	}
	w("## Duels: contender and baseline interleaved\n\n")
	w("Each row is one contender and its baseline running at the same time, the load alternating between them (see [Method](#method)). ")
	w("Ratio: the contender's throughput over the baseline's in adjacent slices, median and interquartile range over the pairs. ")
	w("CPU: each process's own CPU time per request (median over its slices), and the median of the pairs' differences; for proxies, also the difference of the shared upstream's CPU charged to each side.\n\n")
	w("| contender | baseline | scenario | clients | pairs | ratio | IQR | CPU µs/req | baseline CPU µs/req | + CPU µs/req | + upstream CPU µs/req |\n")
	w("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range doc.Duels {
		r, cpu, up := results.Summarize(d.Ratios()), results.Summarize(d.CPUDiffs()), results.Summarize(d.UpstreamCPUDiffs())
		upCell := "-"
		if hasUpstream(d) {
			upCell = signed(up.Median)
		}
		conns := d.Conns
		if conns == 0 {
			conns = doc.Config.Connections
		}
		w("| %s | %s | %s | %d | %d x %s | %.2fx | %.2f-%.2f | %.0f | %.0f | %s (IQR %s to %s) | %s |\n",
			baselineName(doc, d.Contender), baselineName(doc, d.Baseline), scenarioTitle[d.Scenario], conns, r.N, d.Slice, r.Median, r.Q1, r.Q3,
			sliceMedian(d, func(p results.Pair) float64 { return p.Contender.CPUPerReq }),
			sliceMedian(d, func(p results.Pair) float64 { return p.Baseline.CPUPerReq }),
			signed(cpu.Median), signed(cpu.Q1), signed(cpu.Q3), upCell)
	}
	w("\n")
}

// hasUpstream reports whether d's sides front an upstream, which then ran
// some of their requests.
func hasUpstream(d results.Duel) bool {
	for _, p := range d.Pairs {
		if p.Contender.UpstreamCPUPerReq > 0 || p.Baseline.UpstreamCPUPerReq > 0 {
			return true
		}
	}
	return false
}

// writeRatioGoal decides a throughput goal on its duel when one ran, the
// rounds' figure kept beside it, and on the rounds' otherwise (the rounds
// run at the run's -c only).
func writeRatioGoal(w func(string, ...any), doc *results.Doc, g goal.Ratio) {
	what := fmt.Sprintf("%s, %s: >= %.2fx", g.What, scenarioTitle[g.Scenario], g.Min)
	rx, rounds := roundsFigure(doc, g.Scenario, g.Contender, g.Baseline)
	if g.Conns != 0 && g.Conns != doc.Config.Connections {
		rounds = ""
	}
	if d := findDuel(doc, g.Duel); d != nil {
		x := results.Summarize(d.Ratios()).Median
		if rounds != "" {
			rounds = "; rounds: " + rounds
		}
		goalRow(w, what, duelFigure(d)+rounds, x >= g.Min, g.Duel)
		return
	}
	if rounds == "" {
		w("| %s | not measured | - | |\n", what)
		return
	}
	goalRow(w, what, rounds, rx >= g.Min, g.Duel)
}

// roundsFigure is the round-based ratio of id over base: the median of the
// rounds' own ratios, and how it reads in a goal cell; "" when either did
// not run.
func roundsFigure(doc *results.Doc, sc, id, base string) (float64, string) {
	rs := rows(doc, sc)
	r, b := find(rs, id), find(rs, base)
	pr := pairedRatios(doc, sc, id, base)
	if r == nil || b == nil || len(pr) == 0 {
		return 0, ""
	}
	x := median(pr)
	return x, fmt.Sprintf("%.2fx (median of each round's ratio%s; medians of the rounds %s vs %s req/s, p99 %s ms vs %s ms)",
		x, spread(pr), num(r.Throughput), num(b.Throughput), ms(r.P99), ms(b.P99))
}

// baselineTitle names a goal's baseline as the goals read: "the plain
// proxy".
func baselineTitle(doc *results.Doc, id string) string {
	if id == "proxy" {
		return "the plain proxy"
	}
	return baselineName(doc, id)
}

// duelsBehind states the duels an idem contender lost to its baseline.
func duelsBehind(doc *results.Doc) []string {
	var out []string
	for _, d := range doc.Duels {
		r := results.Summarize(d.Ratios())
		if !isIdem(results.Contender{ID: d.Contender}) || r.N == 0 || r.Median >= 1 {
			continue
		}
		out = append(out, fmt.Sprintf("%s, %s, interleaved with %s: %.2fx its throughput (median of %d pairs, IQR %.2f-%.2f).",
			baselineName(doc, d.Contender), scenarioTitle[d.Scenario], baselineName(doc, d.Baseline), r.Median, r.N, r.Q1, r.Q3))
	}
	return out
}

// signed formats a difference of µs with its sign, rounded; a difference
// that rounds to nothing is "+0", not "-0".
func signed(v float64) string {
	v = math.Round(v)
	if v == 0 {
		v = 0 // math.Round(-0.3) is a negative zero, which prints as -0
	}
	return fmt.Sprintf("%+.0f", v)
}
