package runner

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os/exec"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/results"
)

// CallOptions configures CallDuels.
type CallOptions struct {
	// Test is the compiled test binary of internal/inproc (BenchmarkCall).
	Test string
	// Pairs of runs per scenario, Calls per run.
	Pairs, Calls int
}

// CallDuels compares idem's middleware with the same-stack reference
// called in process (BenchmarkCall), for first calls and replays: each
// run of a side is its own process, the sides in turn, A B B A ..., so
// that a pair's two runs see the same machine and neither shares a heap
// or a garbage collector with the other.
func CallDuels(ctx context.Context, opts CallOptions, doc *results.Doc) error {
	for _, sc := range []string{"first", "replay"} {
		d := results.CallDuel{Contender: "mw-memory", Baseline: "ref-mw", Scenario: sc, Calls: opts.Calls}
		log.Printf("calls: idem middleware vs reference, %s (%d pairs of %d calls)", sc, opts.Pairs, opts.Calls)
		b := benchRun{test: opts.Test, benchtime: fmt.Sprintf("%dx", opts.Calls), prefix: "Call/"}
		run := func(s side) (results.CallFigure, error) {
			name := map[side]string{contenderSide: "idem", baselineSide: "ref"}[s]
			return b.run(ctx, "^BenchmarkCall$/^"+name+"$/^"+sc+"$")
		}
		var err error
		d.Pairs, err = alternate(opts.Pairs, run, func(i int, c, r results.CallFigure) {
			log.Printf("  pair %2d: idem %.0f cpu-ns %.0f allocs, ref %.0f cpu-ns %.0f allocs", i+1, c.CPUNsPerOp, c.AllocsOp, r.CPUNsPerOp, r.AllocsOp)
		})
		if err != nil {
			return fmt.Errorf("calls %s: %w", sc, err)
		}
		cpu, allocs := results.Summarize(d.Diffs(cpuNs)), results.Summarize(d.Diffs(allocsOp))
		log.Printf("  %s: idem - ref: %+.0f CPU ns/call (IQR %+.0f to %+.0f), %+.0f allocations", sc, cpu.Median, cpu.Q1, cpu.Q3, allocs.Median)
		doc.Calls = append(doc.Calls, d)
	}
	return nil
}

// AppendOptions configures AppendDuels.
type AppendOptions struct {
	// Test is the compiled test binary of store/file (BenchmarkAnchor),
	// run in Dir (the package's directory).
	Test, Dir string
	// Pairs of runs per goal, each run -test.benchtime Benchtime.
	Pairs     int
	Benchtime string
}

// AppendDuels runs the sides of each goal.AppendGoals in turn, as
// CallDuels does: the file store's log against one synced append of the
// same bytes to Pebble's WAL, pairs per second, at the goal's writers.
func AppendDuels(ctx context.Context, opts AppendOptions, doc *results.Doc) error {
	b := benchRun{test: opts.Test, dir: opts.Dir, benchtime: opts.Benchtime, prefix: "Anchor/"}
	for _, g := range goal.AppendGoals {
		d := results.CallDuel{Contender: g.Contender, Baseline: g.Baseline, Writers: g.Writers, Benchtime: opts.Benchtime}
		log.Printf("appends: file store %s vs %s, %d writers (%d pairs of %s runs)", g.Contender, g.Baseline, g.Writers, opts.Pairs, opts.Benchtime)
		run := func(s side) (results.CallFigure, error) {
			name := map[side]string{contenderSide: g.Contender, baselineSide: g.Baseline}[s]
			return b.run(ctx, fmt.Sprintf("^BenchmarkAnchor$/^c%d$/^%s$", g.Writers, name))
		}
		var err error
		d.Pairs, err = alternate(opts.Pairs, run, func(i int, c, w results.CallFigure) {
			log.Printf("  pair %2d: %s %.0f pairs/s %.1f cpu-µs, %s %.0f pairs/s %.1f cpu-µs: %.2fx", i+1,
				g.Contender, c.PerSec, c.CPUNsPerOp/1000, g.Baseline, w.PerSec, w.CPUNsPerOp/1000, c.PerSec/w.PerSec)
		})
		if err != nil {
			return fmt.Errorf("appends %s/%s at %d writers: %w", g.Contender, g.Baseline, g.Writers, err)
		}
		r := results.Summarize(d.Ratios(perSec))
		log.Printf("  %s/%s at %d writers: %.2fx (IQR %.2f-%.2f)", g.Contender, g.Baseline, g.Writers, r.Median, r.Q1, r.Q3)
		doc.Appends = append(doc.Appends, d)
	}
	return nil
}

// alternate runs pairs pairs of one run of each side, in the order abba
// gives (A B B A ...), calling logPair after each pair.
func alternate(pairs int, run func(side) (results.CallFigure, error), logPair func(i int, contender, baseline results.CallFigure)) ([]results.CallPair, error) {
	var out []results.CallPair
	for i := range pairs {
		order := abba(i)
		var got [2]results.CallFigure
		for _, s := range order {
			f, err := run(s)
			if err != nil {
				return out, fmt.Errorf("pair %d: %w", i+1, err)
			}
			got[s] = f
		}
		out = append(out, results.CallPair{ContenderFirst: order[0] == contenderSide, Contender: got[contenderSide], Baseline: got[baselineSide]})
		logPair(i, got[contenderSide], got[baselineSide])
	}
	return out, nil
}

func cpuNs(f results.CallFigure) float64    { return f.CPUNsPerOp }
func allocsOp(f results.CallFigure) float64 { return f.AllocsOp }
func perSec(f results.CallFigure) float64   { return f.PerSec }

// benchRun runs one sub-benchmark of a compiled test binary per process.
type benchRun struct {
	test, dir string
	benchtime string
	// prefix is the benchmark's name without "Benchmark", with a slash:
	// the result read is the first that has it.
	prefix string
}

// run runs the sub-benchmarks matching pattern once and reads the result.
func (b benchRun) run(ctx context.Context, pattern string) (results.CallFigure, error) {
	cmd := exec.CommandContext(ctx, b.test, "-test.run", "^$", "-test.bench", pattern,
		"-test.benchtime", b.benchtime, "-test.benchmem", "-test.count", "1")
	cmd.Dir = b.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return results.CallFigure{}, fmt.Errorf("%v\n%s", err, out)
	}
	return parseBench(out, b.prefix)
}

// parseBench reads the first benchmark result named with prefix.
func parseBench(out []byte, prefix string) (results.CallFigure, error) {
	br := benchfmt.NewReader(bytes.NewReader(out), "run")
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok || !strings.HasPrefix(string(res.Name), prefix) {
			continue
		}
		var f results.CallFigure
		for _, v := range res.Values {
			unit, val := v.OrigUnit, v.OrigValue
			if unit == "" {
				unit, val = v.Unit, v.Value
			}
			switch unit {
			case "ns/op":
				f.NsPerOp = val
			case "cpu-ns/op":
				f.CPUNsPerOp = val
			case "cpu-µs/op":
				f.CPUNsPerOp = val * 1000
			case "allocs/op":
				f.AllocsOp = val
			case "pairs/sync":
				f.PerSync = val
			case "B/op":
				f.BytesOp = val
			default:
				if strings.HasSuffix(unit, "/s") {
					f.PerSec = val
				}
			}
		}
		return f, nil
	}
	if err := br.Err(); err != nil {
		return results.CallFigure{}, err
	}
	return results.CallFigure{}, fmt.Errorf("no %s result in %q", prefix, out)
}
