package runner

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os/exec"
	"strings"

	"golang.org/x/perf/benchfmt"

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
		run := func(s side) (results.CallFigure, error) {
			name := map[side]string{contenderSide: "idem", baselineSide: "ref"}[s]
			return benchCall(ctx, opts, name, sc)
		}
		for i := range opts.Pairs {
			order := abba(i)
			var got [2]results.CallFigure
			for _, s := range order {
				f, err := run(s)
				if err != nil {
					return fmt.Errorf("calls %s pair %d: %w", sc, i+1, err)
				}
				got[s] = f
			}
			d.Pairs = append(d.Pairs, results.CallPair{ContenderFirst: order[0] == contenderSide, Contender: got[contenderSide], Baseline: got[baselineSide]})
			log.Printf("  pair %2d: idem %.0f cpu-ns %.0f allocs, ref %.0f cpu-ns %.0f allocs", i+1,
				got[contenderSide].CPUNsPerOp, got[contenderSide].AllocsOp, got[baselineSide].CPUNsPerOp, got[baselineSide].AllocsOp)
		}
		cpu, allocs := results.Summarize(d.Diffs(cpuNs)), results.Summarize(d.Diffs(allocsOp))
		log.Printf("  %s: idem - ref: %+.0f CPU ns/call (IQR %+.0f to %+.0f), %+.0f allocations", sc, cpu.Median, cpu.Q1, cpu.Q3, allocs.Median)
		doc.Calls = append(doc.Calls, d)
	}
	return nil
}

func cpuNs(f results.CallFigure) float64    { return f.CPUNsPerOp }
func allocsOp(f results.CallFigure) float64 { return f.AllocsOp }

// benchCall runs BenchmarkCall/side/sc once.
func benchCall(ctx context.Context, opts CallOptions, side, sc string) (results.CallFigure, error) {
	out, err := exec.CommandContext(ctx, opts.Test, "-test.run", "^$", "-test.bench", "^BenchmarkCall$/^"+side+"$/^"+sc+"$",
		"-test.benchtime", fmt.Sprintf("%dx", opts.Calls), "-test.benchmem", "-test.count", "1").CombinedOutput()
	if err != nil {
		return results.CallFigure{}, fmt.Errorf("%v\n%s", err, out)
	}
	return parseCall(out)
}

// parseCall reads the one benchmark result of a run.
func parseCall(out []byte) (results.CallFigure, error) {
	br := benchfmt.NewReader(bytes.NewReader(out), "run")
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok || !strings.HasPrefix(string(res.Name), "Call/") {
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
			case "allocs/op":
				f.AllocsOp = val
			case "B/op":
				f.BytesOp = val
			}
		}
		return f, nil
	}
	if err := br.Err(); err != nil {
		return results.CallFigure{}, err
	}
	return results.CallFigure{}, fmt.Errorf("no BenchmarkCall result in %q", out)
}
