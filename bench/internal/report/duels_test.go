package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/results"
)

// duelOf returns a duel whose pairs have the given ratios, the baseline at
// 1000 req/s and 50 µs/req, the contender 10 µs/req more.
func duelOf(id, base, sc string, ratios ...float64) results.Duel {
	d := results.Duel{Contender: id, Baseline: base, Scenario: sc}
	for i, r := range ratios {
		b := results.Slice{Requests: 1000, Throughput: 1000, CPUPerReq: 50}
		c := results.Slice{Requests: uint64(1000 * r), Throughput: 1000 * r, CPUPerReq: 60}
		d.Pairs = append(d.Pairs, results.NewPair(c, b, i%2 == 0))
	}
	return d
}

func goalLine(t *testing.T, doc *results.Doc, g goal.Ratio) string {
	t.Helper()
	var b strings.Builder
	writeRatioGoal(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, doc, g)
	return b.String()
}

// TestRatioGoalDecidedByDuel: the rounds meet the goal, the duel does not;
// the duel decides, and the rounds' figure stays beside it. Without the
// duel, the rounds decide.
func TestRatioGoalDecidedByDuel(t *testing.T) {
	g := goal.Ratio{Duel: goal.Duel{Contender: "gw", Baseline: "proxy", Scenario: "first"}, What: "gateway", Min: 0.9}
	doc := &results.Doc{
		Config:     results.Config{Connections: 64},
		Contenders: []results.Contender{{ID: "gw", Name: "gw"}, {ID: "proxy", Name: "proxy"}},
		Runs: []results.Run{
			{Contender: "gw", Scenario: "first", Round: 1, Throughput: 95},
			{Contender: "proxy", Scenario: "first", Round: 1, Throughput: 100},
		},
		Duels: []results.Duel{duelOf("gw", "proxy", "first", 0.8, 0.9, 0.85, 0.95, 0.7)},
	}
	line := goalLine(t, doc, g)
	for _, want := range []string{"0.85x (median of 5 interleaved pairs, IQR 0.80-0.90; +10 CPU µs/req)", "rounds: 0.95x", "| **no** |"} {
		if !strings.Contains(line, want) {
			t.Errorf("goal line %q lacks %q", line, want)
		}
	}
	doc.Duels = nil
	if line := goalLine(t, doc, g); !strings.Contains(line, "0.95x (median of each round's ratio") || !strings.HasSuffix(line, "| yes |  |\n") {
		t.Errorf("without a duel: %q", line)
	}
	doc.Runs = nil
	if line := goalLine(t, doc, g); !strings.Contains(line, "not measured") {
		t.Errorf("without a duel or rounds: %q", line)
	}
}

// TestDuelClients: a goal at 16 clients is decided by the duel at 16
// clients, not by the one at the run's 64, nor by the rounds.
func TestDuelClients(t *testing.T) {
	g := goal.Ratio{Duel: goal.Duel{Contender: "gw", Baseline: "mem", Scenario: "first", Conns: 16}, What: "durability", Min: 0.85}
	d64 := duelOf("gw", "mem", "first", 0.95, 0.95, 0.95)
	d64.Conns = 64
	doc := &results.Doc{Config: results.Config{Connections: 64}, Duels: []results.Duel{d64}}
	if line := goalLine(t, doc, g); !strings.Contains(line, "not measured") {
		t.Errorf("the 64-client duel decided the 16-client goal: %q", line)
	}
	d16 := duelOf("gw", "mem", "first", 0.8, 0.8, 0.8)
	d16.Conns = 16
	doc.Duels = append(doc.Duels, d16)
	if line := goalLine(t, doc, g); !strings.Contains(line, "0.80x") || !strings.Contains(line, "| **no** |") {
		t.Errorf("16 clients: %q", line)
	}
	g.Conns = 0 // the run's own -c: the duel saved at 64
	if line := goalLine(t, doc, g); !strings.Contains(line, "0.95x") {
		t.Errorf("run's clients: %q", line)
	}
}

// TestCallGoal: the middleware's goal is decided on the median of the
// pairs' differences, CPU and allocations both.
func TestCallGoal(t *testing.T) {
	line := func(cpuDiff, allocDiff float64) string {
		d := results.CallDuel{Contender: "mw-memory", Baseline: "ref-mw", Scenario: "first", Calls: 100}
		for i := range 3 {
			d.Pairs = append(d.Pairs, results.CallPair{ContenderFirst: i%2 == 0,
				Contender: results.CallFigure{CPUNsPerOp: 5000 + cpuDiff, AllocsOp: 30 + allocDiff},
				Baseline:  results.CallFigure{CPUNsPerOp: 5000, AllocsOp: 30}})
		}
		var b strings.Builder
		writeCallGoal(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &results.Doc{Calls: []results.CallDuel{d}}, goal.CallGoals[0])
		return b.String()
	}
	if l := line(1500, 8); !strings.Contains(l, "+1.50 µs CPU (median of 3 pairs") || !strings.Contains(l, "+8 allocations") || !strings.Contains(l, "| yes |") {
		t.Errorf("within: %q", l)
	}
	if l := line(2500, 8); !strings.Contains(l, "| **no** |") || !strings.Contains(l, "CPU is over the goal; allocations are within it.") {
		t.Errorf("CPU over: %q", l)
	}
	if l := line(1000, 12); !strings.Contains(l, "| **no** |") || !strings.Contains(l, "Allocations are over the goal; CPU is within it.") {
		t.Errorf("allocations over: %q", l)
	}
	if l := line(2500, 12); !strings.Contains(l, "CPU and allocations are both over the goal.") {
		t.Errorf("both over: %q", l)
	}
}

// TestSigned: differences keep their sign, but a nothing is "+0".
func TestSigned(t *testing.T) {
	for v, want := range map[float64]string{-0.3: "+0", 0: "+0", -0.6: "-1", 2.4: "+2", -28.5: "-29"} {
		if got := signed(v); got != want {
			t.Errorf("signed(%v) = %q, want %q", v, got, want)
		}
	}
}
