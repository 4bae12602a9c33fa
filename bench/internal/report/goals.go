package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/results"
)

// writeGoals writes the goal table: each goal, what this run measured,
// whether it is met, and where not, why and what would close it (why).
func writeGoals(w func(string, ...any), doc *results.Doc) {
	w("## Goals\n\n")
	w("Every figure below comes from this run. Throughput ratios are medians of pairs of slices interleaved side by side (A B B A ...), with their interquartile range; the middleware's CPU and allocations are medians of pairs of benchmark runs, each its own process, interleaved the same way.\n\n")
	w("| goal | measured | met | why not, and what would close it |\n|---|---|---|---|\n")
	writeFootprintGoals(w, doc)
	writeChurnGoal(w, doc)
	for _, g := range goal.Ratios {
		writeRatioGoal(w, doc, g)
	}
	for _, g := range goal.AppendGoals {
		writeAppendGoal(w, doc, g)
	}
	for _, g := range goal.CallGoals {
		writeCallGoal(w, doc, g)
	}
	var worst int64
	var stores []string
	for _, r := range raceRows(doc) {
		if isIdem(r.C) {
			worst = max(worst, r.MaxExec)
			if r.MinExec < 1 {
				worst = max(worst, 1000) // a key that never ran is a failure too
			}
			stores = append(stores, r.C.ID)
		}
	}
	if len(stores) > 0 {
		goalRow(w, fmt.Sprintf("race: exactly 1 execution per key for idem on every store (%s)", strings.Join(stores, ", ")),
			fmt.Sprintf("max %d per key", worst), worst == 1, "race")
	}
	w("\n")
}

// goalRow writes one row; key finds the explanation of a goal not met.
func goalRow(w func(string, ...any), what, measured string, met bool, key any) {
	note := ""
	if !met {
		note = why[fmt.Sprint(key)]
	}
	goalRowNote(w, what, measured, met, note)
}

// goalRowNote writes one row with its note.
func goalRowNote(w func(string, ...any), what, measured string, met bool, note string) {
	w("| %s | %s | %s | %s |\n", what, measured, yesNo(met), note)
}

// Keys of why for the goals that are not ratio duels.
const (
	keyMemory  = "file memory per key"
	keyRestart = "file restart"
	keyChurn   = "churn"
)

func footprintOf(doc *results.Doc, store string) *results.Footprint {
	for i := range doc.Footprint {
		if doc.Footprint[i].Store == store {
			return &doc.Footprint[i]
		}
	}
	return nil
}

// writeFootprintGoals: the file store's memory per key and restart, at
// goal.FootprintKeys; at fewer keys the figure is shown and not judged.
func writeFootprintGoals(w func(string, ...any), doc *results.Doc) {
	at := count(goal.FootprintKeys)
	memWhat := fmt.Sprintf("file store: memory per live key at %s keys <= %d B", at, goal.MaxBytesPerKey)
	rsWhat := fmt.Sprintf("file store: restart at %s keys <= %d s, after a Close and after kill -9", at, goal.MaxRestartSeconds)
	f := footprintOf(doc, "file")
	if f == nil || f.Err != "" && f.BytesPerKey == 0 {
		w("| %s | not measured | - | |\n| %s | not measured | - | |\n", memWhat, rsWhat)
		return
	}
	full := f.Keys >= goal.FootprintKeys
	partial := func(s string) string {
		if full {
			return s
		}
		return fmt.Sprintf("%s (at %s keys only, not judged)", s, count(f.Keys))
	}
	mem := fmt.Sprintf("%.1f B after writing (RSS growth / keys), %.1f B after a restart", f.BytesPerKey, f.RestartBytesPerKey)
	rs := fmt.Sprintf("%.2f s after a Close; %.2f s after kill -9 with %s keys written since the last snapshot; whole log replayed (no snapshot): %.2f s",
		f.RestartSeconds, f.KillRestartSeconds, count(f.KillKeys), f.ReplaySeconds)
	if full {
		goalRow(w, memWhat, mem, max(f.BytesPerKey, f.RestartBytesPerKey) <= goal.MaxBytesPerKey, keyMemory)
		goalRow(w, rsWhat, rs, f.RestartSeconds <= goal.MaxRestartSeconds && f.KillRestartSeconds > 0 && f.KillRestartSeconds <= goal.MaxRestartSeconds, keyRestart)
		return
	}
	w("| %s | %s | - | |\n| %s | %s | - | |\n", memWhat, partial(mem), rsWhat, partial(rs))
}

func writeChurnGoal(w func(string, ...any), doc *results.Doc) {
	what := fmt.Sprintf("file store: log size under churn <= %.0fx its live data", float64(goal.MaxChurnRatio))
	if len(doc.Churn) == 0 {
		w("| %s | not measured | - | |\n", what)
		return
	}
	worst := 0.0
	var parts []string
	for _, c := range doc.Churn {
		worst = max(worst, c.After, c.Before)
		label := "TTL " + c.TTL
		if c.Cleanup == "none" {
			label += " with no Cleanup"
		}
		parts = append(parts, fmt.Sprintf("%s: %.2fx after a Cleanup, %.2fx before", label, c.After, c.Before))
	}
	goalRow(w, what, fmt.Sprintf("at most %.2fx (%s; `%s`)", worst, strings.Join(parts, "; "), doc.Churn[0].Command), worst <= goal.MaxChurnRatio, keyChurn)
}

func findCalls(doc *results.Doc, sc string) *results.CallDuel {
	for i, d := range doc.Calls {
		if d.Scenario == sc && len(d.Pairs) > 0 {
			return &doc.Calls[i]
		}
	}
	return nil
}

func writeCallGoal(w func(string, ...any), doc *results.Doc, g goal.Calls) {
	what := fmt.Sprintf("idem middleware (idemhttp, memory store) over the same-stack reference, %s: <= +%.0f µs CPU and +%.0f allocations a call",
		scenarioTitle[g.Scenario], g.MaxCPUMicros, g.MaxAllocs)
	d := findCalls(doc, g.Scenario)
	if d == nil {
		w("| %s | not measured | - | |\n", what)
		return
	}
	cpu, allocs := results.Summarize(d.Diffs(cpuNs)), results.Summarize(d.Diffs(allocsOp))
	ic, rc := results.Summarize(d.Side(true, cpuNs)), results.Summarize(d.Side(false, cpuNs))
	ia, ra := results.Summarize(d.Side(true, allocsOp)), results.Summarize(d.Side(false, allocsOp))
	measured := fmt.Sprintf("%+.2f µs CPU (median of %d pairs, IQR %+.2f to %+.2f; %.2f vs %.2f µs), %+.0f allocations (%.0f vs %.0f)",
		cpu.Median/1000, cpu.N, cpu.Q1/1000, cpu.Q3/1000, ic.Median/1000, rc.Median/1000, allocs.Median, ia.Median, ra.Median)
	if hd := findDuel(doc, goal.Duel{Contender: "mw-memory", Baseline: "ref-mw", Scenario: g.Scenario}); hd != nil {
		measured += fmt.Sprintf("; over HTTP: %s CPU µs/req, %.2fx the throughput", signed(results.Summarize(hd.CPUDiffs()).Median), results.Summarize(hd.Ratios()).Median)
	}
	cpuMet, allocsMet := cpu.Median <= g.MaxCPUMicros*1000, allocs.Median <= g.MaxAllocs
	note := ""
	if !cpuMet || !allocsMet {
		note = callShortfall(cpuMet, allocsMet) + " " + why["calls "+g.Scenario]
	}
	goalRowNote(w, what, measured, cpuMet && allocsMet, note)
}

// callShortfall says which half of a middleware goal this run missed, so
// that the explanation beside it never says what the measurement denies.
func callShortfall(cpuMet, allocsMet bool) string {
	switch {
	case cpuMet:
		return "Allocations are over the goal; CPU is within it."
	case allocsMet:
		return "CPU is over the goal; allocations are within it."
	}
	return "CPU and allocations are both over the goal."
}

func findAppends(doc *results.Doc, g goal.Append) *results.CallDuel {
	for i, d := range doc.Appends {
		if d.Contender == g.Contender && d.Baseline == g.Baseline && d.Writers == g.Writers && len(d.Ratios(perSec)) > 0 {
			return &doc.Appends[i]
		}
	}
	return nil
}

// appendKey is the key of why for an append goal.
func appendKey(g goal.Append) string { return fmt.Sprintf("append %d", g.Writers) }

func writeAppendGoal(w func(string, ...any), doc *results.Doc, g goal.Append) {
	what := fmt.Sprintf("file store's log with one synced append a first call (BenchmarkAnchor %s) over one synced append of the same bytes to Pebble's WAL (%s), store level, %d writers: >= %.2fx",
		g.Contender, g.Baseline, g.Writers, g.Min)
	d := findAppends(doc, g)
	if d == nil {
		w("| %s | not measured | - | |\n", what)
		return
	}
	r := results.Summarize(d.Ratios(perSec))
	measured := fmt.Sprintf("%.2fx (median of %d pairs of %s runs, IQR %.2f-%.2f; %s vs %s pairs/s, %.1f vs %.1f CPU µs a pair)",
		r.Median, r.N, d.Benchtime, r.Q1, r.Q3, num(results.Summarize(d.Side(true, perSec)).Median), num(results.Summarize(d.Side(false, perSec)).Median),
		results.Summarize(d.Side(true, cpuNs)).Median/1000, results.Summarize(d.Side(false, cpuNs)).Median/1000)
	goalRow(w, what, measured, r.Median >= g.Min, appendKey(g))
}

// writeAppends lists the store-level pairs of the append goals.
func writeAppends(w func(string, ...any), doc *results.Doc) {
	if len(doc.Appends) == 0 {
		return
	}
	w("## The file store's log against one synced append, store level\n\n")
	w("`BenchmarkAnchor` in `store/file` (docs/bench/FILE-LOG.md): durable reserve+complete pairs from N writers through the file store with `OneSync` (log1: the reservation buffered, the completion synced, one sync a pair shared by the group commit), against `pebble.LogData` of the pair's bytes with `pebble.Sync` (wal1: one synced append of the same bytes from as many writers, with nothing else). Each run of a side is its own process, the sides in turn A B B A ...; the ratio is log1's pairs per second over wal1's in each pair. CPU is the process's user+system time a pair; pairs a sync, how many pairs an fdatasync covered.\n\n")
	w("| writers | pairs x benchtime | log1 / wal1 (IQR) | log1 pairs/s | wal1 pairs/s | log1 CPU µs | wal1 CPU µs | log1 pairs a sync | wal1 pairs a sync |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range doc.Appends {
		r := results.Summarize(d.Ratios(perSec))
		med := func(c bool, f func(results.CallFigure) float64) float64 {
			return results.Summarize(d.Side(c, f)).Median
		}
		perSync := func(f results.CallFigure) float64 { return f.PerSync }
		w("| %d | %d x %s | %.2fx (%.2f-%.2f) | %s | %s | %.1f | %.1f | %.1f | %.1f |\n", d.Writers, r.N, d.Benchtime, r.Median, r.Q1, r.Q3,
			num(med(true, perSec)), num(med(false, perSec)), med(true, cpuNs)/1000, med(false, cpuNs)/1000, med(true, perSync), med(false, perSync))
	}
	w("\n")
}

func perSec(f results.CallFigure) float64   { return f.PerSec }
func cpuNs(f results.CallFigure) float64    { return f.CPUNsPerOp }
func allocsOp(f results.CallFigure) float64 { return f.AllocsOp }

// writeCalls lists the middleware's in-process pairs.
func writeCalls(w func(string, ...any), doc *results.Doc) {
	if len(doc.Calls) == 0 {
		return
	}
	w("## Middleware against the same-stack reference, call by call\n\n")
	w("`BenchmarkCall` in `bench/internal/inproc`: the same operation behind idem's middleware (idemhttp with its defaults, the memory store) and behind the reference (`bench/internal/refmw`: SHA-256 of the body, a `sync.Map` reservation, a buffered replay of status, headers and body), called directly with `httptest` requests, one call at a time. Each run of a side is its own process (`-benchtime Nx -benchmem`), the sides in turn A B B A ..., so that neither shares a heap or a garbage collector with the other. CPU is the process's user+system time per call, the garbage collector's included; both sides count the test request and recorder they are called with, which cancel in the difference.\n\n")
	w("| scenario | pairs x calls | idem CPU µs | reference CPU µs | + CPU µs (IQR) | idem allocs | reference allocs | + allocs | idem B | reference B |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range doc.Calls {
		cpu, allocs := results.Summarize(d.Diffs(cpuNs)), results.Summarize(d.Diffs(allocsOp))
		med := func(c bool, f func(results.CallFigure) float64) float64 {
			return results.Summarize(d.Side(c, f)).Median
		}
		bytesOp := func(f results.CallFigure) float64 { return f.BytesOp }
		w("| %s | %d x %s | %.2f | %.2f | %+.2f (%+.2f to %+.2f) | %.0f | %.0f | %+.0f | %.0f | %.0f |\n",
			scenarioTitle[d.Scenario], cpu.N, num(float64(d.Calls)), med(true, cpuNs)/1000, med(false, cpuNs)/1000,
			cpu.Median/1000, cpu.Q1/1000, cpu.Q3/1000, med(true, allocsOp), med(false, allocsOp), allocs.Median,
			med(true, bytesOp), med(false, bytesOp))
	}
	w("\n")
}

// writeFootprint lists what live keys cost each store, and its restarts.
func writeFootprint(w func(string, ...any), doc *results.Doc) {
	if len(doc.Footprint) == 0 && len(doc.Churn) == 0 {
		return
	}
	w("## Footprint: live keys, memory, restart\n\n")
	w("`bench/internal/footprint`, through `bench/cmd/storescale`: each store is filled with durable reserve+complete pairs from 64 clients (the gateway's records: a SHA-256 fingerprint, a route, a request ID, a 130-byte stored response, a TTL of a day), each step in its own process. Restart after kill -9: a tenth more keys are written by a process that then holds the store open and is killed with SIGKILL.\n\n")
	if len(doc.Footprint) > 0 {
		w("| store | live keys | fill | bytes per key | measured as | on disk | restart | after kill -9 | whole log replayed | restart is |\n")
		w("|---|---:|---:|---:|---|---:|---:|---:|---:|---|\n")
		fp := slices.Clone(doc.Footprint)
		for _, f := range fp {
			sec := func(v float64) string {
				if v == 0 {
					return "-"
				}
				return fmt.Sprintf("%.2f s", v)
			}
			mem := fmt.Sprintf("%.1f", f.BytesPerKey)
			if f.RestartBytesPerKey > 0 {
				mem += fmt.Sprintf(" (%.1f after a restart)", f.RestartBytesPerKey)
			}
			rate := "-"
			if f.FillSeconds > 0 {
				rate = fmt.Sprintf("%.0f s (%s pairs/s)", f.FillSeconds, num(float64(f.Keys)/f.FillSeconds))
			}
			what := f.MemoryWhat
			if f.Err != "" {
				what += "; **stopped**: " + f.Err
			}
			w("| %s | %s | %s | %s | %s | %.2f GiB | %s | %s | %s | %s |\n", f.Store, count(f.Keys), rate, mem, what,
				float64(f.DiskBytes)/(1<<30), sec(f.RestartSeconds), sec(f.KillRestartSeconds), sec(f.ReplaySeconds), f.RestartWhat)
		}
		w("\n")
	}
	if len(doc.Churn) > 0 {
		w("Disk under churn (`%s`, the file store's own measurement, which reads the log's bytes and its live frames' bytes from inside): new keys written from 8 goroutines for four TTLs, Cleanup every second, 4 MiB segments; the largest ratio of the log to its live data after the first TTL.\n\n", doc.Churn[0].Command)
		w("| TTL | Cleanup | pairs | log / live, after a Cleanup | before a Cleanup |\n|---|---|---:|---:|---:|\n")
		for _, c := range doc.Churn {
			cl := c.Cleanup
			if cl == "" {
				cl = "every second"
			}
			w("| %s | %s | %s | %.2f | %.2f |\n", c.TTL, cl, num(float64(c.Pairs)), c.After, c.Before)
		}
		w("\n")
	}
}
