package runner

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/idem-dev/idem/bench/internal/results"
)

// TestInterleaveOrder: the slices run A B B A A B B A ..., and over every
// two pairs each side's slices sit at the same mean position in time.
func TestInterleaveOrder(t *testing.T) {
	var seq strings.Builder
	pos := [2]int{}
	n := 0
	_, err := interleave(6, func(s side) (results.Slice, error) {
		seq.WriteByte("AB"[s])
		pos[s] += n
		n++
		return results.Slice{Requests: 1, Throughput: 1}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := seq.String(); got != "ABBAABBAABBA" {
		t.Fatalf("order %s", got)
	}
	if pos[contenderSide] != pos[baselineSide] {
		t.Fatalf("sum of positions: contender %d, baseline %d", pos[contenderSide], pos[baselineSide])
	}
}

// TestInterleaveDrift: under a drift linear in time, each pair's ratio is
// off by the drift of one slice, one way when the contender runs first and
// the other way when it runs second, so the pairs' median lands on the
// true ratio; and each pair knows which side ran first.
func TestInterleaveDrift(t *testing.T) {
	const truth = 0.8
	n := 0
	pairs, err := interleave(10, func(s side) (results.Slice, error) {
		// The machine slows by 1% per slice.
		v := 1000 * (1 - 0.01*float64(n))
		if s == contenderSide {
			v *= truth
		}
		n++
		return results.Slice{Requests: uint64(v), Throughput: v}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d := results.Duel{Pairs: pairs}
	var above, below int
	for i, p := range pairs {
		if p.ContenderFirst != (i%2 == 0) {
			t.Errorf("pair %d: contender first %v", i, p.ContenderFirst)
		}
		// Running first is running faster on a slowing machine.
		if (p.Ratio > truth) != p.ContenderFirst {
			t.Errorf("pair %d: ratio %.4f with contender first %v", i, p.Ratio, p.ContenderFirst)
		}
		if p.Ratio > truth {
			above++
		} else {
			below++
		}
	}
	if above != 5 || below != 5 {
		t.Errorf("%d ratios above the truth, %d below", above, below)
	}
	if m := results.Summarize(d.Ratios()).Median; math.Abs(m-truth) > 0.001 {
		t.Errorf("median %.4f, want %.4f", m, truth)
	}
}

// TestInterleaveError: a failed slice ends the duel with the pairs done so
// far and says which pair failed.
func TestInterleaveError(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	pairs, err := interleave(4, func(side) (results.Slice, error) {
		n++
		if n == 4 {
			return results.Slice{}, boom
		}
		return results.Slice{Requests: 1, Throughput: 1}, nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "pair 2") || len(pairs) != 1 {
		t.Fatalf("pairs %d, error %v", len(pairs), err)
	}
}
