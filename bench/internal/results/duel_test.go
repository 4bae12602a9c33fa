package results

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestSummarize: quartiles interpolated between ranks, whatever the order
// of the sample.
func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		xs        []float64
		q1, m, q3 float64
		n         int
	}{
		{[]float64{4, 1, 3, 2}, 1.75, 2.5, 3.25, 4},
		{[]float64{1.3, 0.8, 1.0, 0.9, 1.2, 0.7, 1.1, 0.95, 1.05, 0.85}, 0.8625, 0.975, 1.0875, 10},
		{[]float64{3, 1, 2}, 1.5, 2, 2.5, 3},
		{[]float64{5}, 5, 5, 5, 1},
	} {
		s := Summarize(c.xs)
		if s.N != c.n || !near(s.Q1, c.q1) || !near(s.Median, c.m) || !near(s.Q3, c.q3) {
			t.Errorf("Summarize(%v) = %+v, want n %d, %v %v %v", c.xs, s, c.n, c.q1, c.m, c.q3)
		}
	}
	if s := Summarize(nil); s != (Spread{}) {
		t.Errorf("Summarize(nil) = %+v", s)
	}
}

// TestSummarizeKeepsInput: the caller's slice, in pair order, is not
// sorted under it.
func TestSummarizeKeepsInput(t *testing.T) {
	xs := []float64{3, 1, 2}
	Summarize(xs)
	if !slices.Equal(xs, []float64{3, 1, 2}) {
		t.Fatalf("input reordered: %v", xs)
	}
}

// TestDuelPairs: the ratio is the contender's over the baseline's whichever
// ran first; CPU differences are the contender's minus the baseline's; a
// pair where the baseline answered nothing gives no ratio, and one where a
// side sent nothing gives no CPU figure.
func TestDuelPairs(t *testing.T) {
	sl := func(reqs uint64, thr, cpu, up float64) Slice {
		return Slice{Requests: reqs, Throughput: thr, CPUPerReq: cpu, UpstreamCPUPerReq: up}
	}
	d := Duel{Pairs: []Pair{
		NewPair(sl(900, 900, 70, 20), sl(1000, 1000, 60, 25), true),
		NewPair(sl(800, 800, 75, 20), sl(1000, 1000, 60, 25), false),
		NewPair(sl(500, 500, 80, 20), sl(10, 0, 50, 30), true),
		NewPair(sl(0, 0, 0, 0), sl(1000, 1000, 60, 25), false),
	}}
	if got := d.Ratios(); !slices.Equal(got, []float64{0.9, 0.8, 0}) {
		t.Errorf("ratios %v", got)
	}
	if got := d.CPUDiffs(); !slices.Equal(got, []float64{10, 15, 30}) {
		t.Errorf("CPU differences %v", got)
	}
	if got := d.UpstreamCPUDiffs(); !slices.Equal(got, []float64{-5, -5, -10}) {
		t.Errorf("upstream CPU differences %v", got)
	}
	if p := d.Pairs[2]; p.Ratio != 0 {
		t.Errorf("ratio over a silent baseline %v", p.Ratio)
	}
}
