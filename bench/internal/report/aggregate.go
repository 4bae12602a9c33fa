// Package report turns a results.Doc into BENCHMARKS.md and its PNG charts.
package report

import (
	"fmt"
	"slices"

	"github.com/idem-dev/idem/bench/internal/results"
)

// row is one contender in one scenario, over every round: medians of the
// rates and latencies, the worst of the correctness figures.
type row struct {
	C          results.Contender
	Rounds     int
	Throughput float64
	P50        float64
	P99        float64
	P999       float64
	RSSMiB     float64
	CPU        float64 // µs of the contender's CPU per request
	Success    float64 // lowest of the rounds
	Executions int64   // median per run
	MaxPerKey  int64   // highest of the rounds
	Requests   uint64  // median per run
	Status     map[string]int
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rows returns the scenario's rows in the order of doc.Contenders, only
// for contenders that ran.
func rows(doc *results.Doc, scenario string) []row {
	var out []row
	for _, c := range doc.Contenders {
		var thr, p50, p99, p999, rss, cpu, exec, reqs []float64
		r := row{C: c, Success: 1, Status: map[string]int{}}
		for _, run := range doc.Runs {
			if run.Contender != c.ID || run.Scenario != scenario {
				continue
			}
			r.Rounds++
			thr = append(thr, run.Throughput)
			p50 = append(p50, run.P50)
			p99 = append(p99, run.P99)
			p999 = append(p999, run.P999)
			rss = append(rss, float64(run.PeakRSSKB)/1024)
			cpu = append(cpu, run.CPUPerReq)
			exec = append(exec, float64(run.Executions))
			reqs = append(reqs, float64(run.Requests))
			r.Success = min(r.Success, run.Success)
			r.MaxPerKey = max(r.MaxPerKey, run.MaxPerKey)
			for k, v := range run.Status {
				r.Status[k] += v
			}
		}
		if r.Rounds == 0 {
			continue
		}
		r.Throughput, r.P50, r.P99, r.P999, r.RSSMiB, r.CPU = median(thr), median(p50), median(p99), median(p999), median(rss), median(cpu)
		r.Executions, r.Requests = int64(median(exec)), uint64(median(reqs))
		out = append(out, r)
	}
	return out
}

// find returns the row of contender id, or nil.
func find(rs []row, id string) *row {
	for i := range rs {
		if rs[i].C.ID == id {
			return &rs[i]
		}
	}
	return nil
}

// ratio returns r's throughput over its baseline's, or 0 when there is
// none.
func ratio(rs []row, r row) float64 { return ratioTo(rs, r, r.C.Baseline) }

// ratioTo returns r's throughput over contender id's, or 0.
func ratioTo(rs []row, r row, id string) float64 {
	b := find(rs, id)
	if b == nil || b.Throughput == 0 {
		return 0
	}
	return r.Throughput / b.Throughput
}

// raceRow is one contender's race over every round.
type raceRow struct {
	C        results.Contender
	Rounds   int
	Requests int
	MaxExec  int64 // the most executions of one key, over every round
	MinExec  int64 // the fewest
	Status   map[string]int
	Errors   int
}

func raceRows(doc *results.Doc) []raceRow {
	var out []raceRow
	for _, c := range doc.Contenders {
		r := raceRow{C: c, MinExec: -1, Status: map[string]int{}}
		for _, x := range doc.Races {
			if x.Contender != c.ID {
				continue
			}
			r.Rounds++
			r.Requests += x.Keys * x.PerKey
			r.MaxExec = max(r.MaxExec, x.MaxExec)
			if r.MinExec < 0 || x.MinExec < r.MinExec {
				r.MinExec = x.MinExec
			}
			for k, v := range x.Status {
				r.Status[k] += v
			}
			r.Errors += len(x.Errors)
		}
		if r.Rounds > 0 {
			out = append(out, r)
		}
	}
	return out
}

// pairedRatios returns, for every round in which both ran, contender id's
// throughput in scenario over base's in the same round: a ratio of two
// runs minutes apart, not of two medians taken over the whole run, so a
// machine that drifts between rounds moves both sides of each ratio.
func pairedRatios(doc *results.Doc, scenario, id, base string) []float64 {
	of := func(c string) map[int]float64 {
		m := map[int]float64{}
		for _, run := range doc.Runs {
			if run.Contender == c && run.Scenario == scenario {
				m[run.Round] = run.Throughput
			}
		}
		return m
	}
	a, b := of(id), of(base)
	var out []float64
	for round, x := range a {
		if y := b[round]; y > 0 {
			out = append(out, x/y)
		}
	}
	slices.Sort(out)
	return out
}

// spread says how paired ratios ranged: ", rounds 0.64-0.83", or "" for fewer
// than two.
func spread(xs []float64) string {
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf(", rounds %.2f-%.2f", xs[0], xs[len(xs)-1])
}
