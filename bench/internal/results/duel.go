package results

import (
	"slices"
	"time"
)

// Duel is a contender and its baseline running at the same time, the load
// alternating between them in short slices (A B B A A B B A ...): each
// pair of adjacent slices is taken under the same machine state, which
// rounds minutes apart are not.
type Duel struct {
	Contender string `json:"contender"`
	Baseline  string `json:"baseline"`
	Scenario  string `json:"scenario"`
	// Conns is the number of clients (connections) of the load.
	Conns int           `json:"conns,omitempty"`
	Slice time.Duration `json:"slice"`
	Pairs []Pair        `json:"pairs"`
}

// Pair is one slice of each side, adjacent in time.
type Pair struct {
	// ContenderFirst says which side ran first: pairs alternate, so that
	// neither side is always the one measured later.
	ContenderFirst bool  `json:"contender_first"`
	Contender      Slice `json:"contender"`
	Baseline       Slice `json:"baseline"`
	// Ratio is the contender's throughput over the baseline's, 0 when the
	// baseline answered nothing.
	Ratio float64 `json:"ratio"`
}

// Slice is one side's share of the load in a pair.
type Slice struct {
	Requests   uint64  `json:"requests"`
	Throughput float64 `json:"throughput"` // 2xx responses per second
	Success    float64 `json:"success"`
	// CPUPerReq is the process's CPU time per request, in µs;
	// UpstreamCPUPerReq the shared upstream's during this slice, for
	// proxies.
	CPUPerReq         float64 `json:"cpu_us_per_req"`
	UpstreamCPUPerReq float64 `json:"upstream_cpu_us_per_req,omitempty"`
}

// NewPair pairs two slices and takes their ratio.
func NewPair(contender, baseline Slice, contenderFirst bool) Pair {
	p := Pair{ContenderFirst: contenderFirst, Contender: contender, Baseline: baseline}
	if baseline.Throughput > 0 {
		p.Ratio = contender.Throughput / baseline.Throughput
	}
	return p
}

// Ratios returns each pair's throughput ratio, leaving out pairs whose
// baseline answered nothing.
func (d Duel) Ratios() []float64 {
	var out []float64
	for _, p := range d.Pairs {
		if p.Baseline.Throughput > 0 {
			out = append(out, p.Ratio)
		}
	}
	return out
}

// CPUDiffs returns each pair's CPU µs/req of the contender's process minus
// the baseline's, leaving out pairs where either side sent nothing.
func (d Duel) CPUDiffs() []float64 {
	return d.diffs(func(s Slice) float64 { return s.CPUPerReq })
}

// UpstreamCPUDiffs is CPUDiffs for the shared upstream's CPU charged to
// each side: a gateway that answers replays itself spares the upstream.
func (d Duel) UpstreamCPUDiffs() []float64 {
	return d.diffs(func(s Slice) float64 { return s.UpstreamCPUPerReq })
}

func (d Duel) diffs(f func(Slice) float64) []float64 {
	var out []float64
	for _, p := range d.Pairs {
		if p.Contender.Requests > 0 && p.Baseline.Requests > 0 {
			out = append(out, f(p.Contender)-f(p.Baseline))
		}
	}
	return out
}

// Spread is the median and the interquartile range of a sample.
type Spread struct {
	N              int
	Q1, Median, Q3 float64
}

// Summarize returns xs's quartiles, interpolated between the nearest
// ranks (as R's default and numpy's do), so that ten pairs give quartiles
// that move with every pair rather than jump between them.
func Summarize(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Spread{N: len(s), Q1: quantile(s, 0.25), Median: quantile(s, 0.5), Q3: quantile(s, 0.75)}
}

// quantile of sorted s, by linear interpolation between ranks.
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}
