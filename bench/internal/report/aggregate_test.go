package report

import (
	"slices"
	"testing"

	"github.com/idem-dev/idem/bench/internal/results"
)

// TestPairedRatios: each round's contender over the same round's baseline,
// rounds where either is missing left out.
func TestPairedRatios(t *testing.T) {
	doc := &results.Doc{Runs: []results.Run{
		{Contender: "gw", Scenario: "first", Round: 1, Throughput: 60},
		{Contender: "proxy", Scenario: "first", Round: 1, Throughput: 100},
		{Contender: "gw", Scenario: "first", Round: 2, Throughput: 90},
		{Contender: "proxy", Scenario: "first", Round: 2, Throughput: 100},
		{Contender: "gw", Scenario: "first", Round: 3, Throughput: 50},
		{Contender: "proxy", Scenario: "replay", Round: 3, Throughput: 100},
	}}
	got := pairedRatios(doc, "first", "gw", "proxy")
	if !slices.Equal(got, []float64{0.6, 0.9}) || median(got) != 0.75 || spread(got) != ", rounds 0.60-0.90" {
		t.Fatalf("paired ratios %v, median %v, spread %q", got, median(got), spread(got))
	}
	if spread(got[:1]) != "" {
		t.Fatal("one round has no spread")
	}
}
