package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/results"
)

// appendsOf returns a store-level duel whose pairs have the given ratios
// of log1's pairs/s over wal1's (wal1 at 1000 pairs/s).
func appendsOf(writers int, ratios ...float64) results.CallDuel {
	d := results.CallDuel{Contender: "log1", Baseline: "wal1", Writers: writers, Benchtime: "2s"}
	for i, r := range ratios {
		d.Pairs = append(d.Pairs, results.CallPair{ContenderFirst: i%2 == 0,
			Contender: results.CallFigure{PerSec: 1000 * r, CPUNsPerOp: 7000}, Baseline: results.CallFigure{PerSec: 1000, CPUNsPerOp: 5000}})
	}
	return d
}

// TestAppendGoalsJudgedByMedianRatio: each writer count's goal is decided
// on its own pairs' median ratio, shown with its IQR and why when not met;
// a goal with no pairs is not measured.
func TestAppendGoalsJudgedByMedianRatio(t *testing.T) {
	doc := &results.Doc{Appends: []results.CallDuel{appendsOf(16, 1.1, 0.9, 1.0, 1.2, 0.96), appendsOf(64, 0.8, 0.9, 0.85, 1.0, 0.7)}}
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	lines := map[int]string{}
	for _, g := range goal.AppendGoals {
		b.Reset()
		writeAppendGoal(w, doc, g)
		lines[g.Writers] = b.String()
	}
	for writers, want := range map[int][]string{
		16: {"16 writers", "1.00x (median of 5 pairs of 2s runs, IQR 0.96-1.10", "7.0 vs 5.0 CPU µs", "| yes |"},
		64: {"64 writers", "0.85x (median of 5 pairs of 2s runs, IQR 0.80-0.90", "| **no** |", "log1 writes a pair as two frames"},
	} {
		for _, s := range want {
			if !strings.Contains(lines[writers], s) {
				t.Errorf("%d writers: goal line %q lacks %q", writers, lines[writers], s)
			}
		}
	}
	b.Reset()
	writeAppendGoal(w, &results.Doc{Appends: []results.CallDuel{appendsOf(64)}}, goal.AppendGoals[1])
	if !strings.Contains(b.String(), "not measured") {
		t.Errorf("no pairs: %q", b.String())
	}
}
