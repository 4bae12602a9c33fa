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
	g := goal.Ratio{Contender: "gw", Baseline: "proxy", Scenario: "first", What: "gateway", Min: 0.9}
	doc := &results.Doc{
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
	if line := goalLine(t, doc, g); !strings.Contains(line, "0.95x (median of each round's ratio") || !strings.HasSuffix(line, "| yes |\n") {
		t.Errorf("without a duel: %q", line)
	}
	doc.Runs = nil
	if line := goalLine(t, doc, g); !strings.Contains(line, "not measured") {
		t.Errorf("without a duel or rounds: %q", line)
	}
}

// TestOverheadGoal: idem's middleware is judged against gofiber's on their
// two duels' medians.
func TestOverheadGoal(t *testing.T) {
	o := goal.Overheads[0]
	line := func(idem, peer float64) string {
		doc := &results.Doc{Duels: []results.Duel{
			duelOf(o.Idem.Contender, o.Idem.Baseline, o.Scenario, idem, idem, idem),
			duelOf(o.Peer.Contender, o.Peer.Baseline, o.Scenario, peer, peer, peer),
		}}
		var b strings.Builder
		writeOverheadGoal(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, doc, o)
		return b.String()
	}
	if l := line(0.8, 0.7); !strings.Contains(l, "idem over net/http 0.80x (median of 3") || !strings.Contains(l, "gofiber over fiber 0.70x (median of 3") || !strings.HasSuffix(l, "| yes |\n") {
		t.Errorf("idem ahead: %q", l)
	}
	if l := line(0.7, 0.8); !strings.HasSuffix(l, "| **no** |\n") {
		t.Errorf("gofiber ahead: %q", l)
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
