// Command mwcost measures what idem's middleware adds to a bare net/http
// handler in process: idemhttp's BenchmarkMiddleware, whose "baseline" is
// the bare handler, "first" a new key every request and "replay" one of
// 1,024 answered keys, all on the memory store.
//
// It runs the compiled idemhttp test binary -runs times. Each run measures
// the three one after the other, so an overhead is taken within one run
// (first minus baseline, replay minus baseline) and the runs' overheads
// are summarized by their median and interquartile range. On a machine
// whose speed drifts by a third within minutes, a drift moves the three
// figures of a run together and leaves their differences alone, where
// medians of separate runs of each mix slow and fast periods.
//
//	go test -c -o /tmp/idemhttp.test ./idemhttp
//	go run ./cmd/mwcost -test /tmp/idemhttp.test -runs 15 >cost.md
//
// It prints a Markdown table with the goal of each row, and the raw
// benchmark lines of every run on standard error.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"

	"github.com/idem-dev/idem/bench/internal/results"
	"golang.org/x/perf/benchfmt"
)

// goal is what the middleware may add to the bare handler per request.
type goal struct {
	name   string
	ns     float64 // ns/op
	allocs float64
}

var goals = []goal{{"first", 4000, 25}, {"replay", 2000, 10}}

// run is one run's figures per sub-benchmark and unit.
type run map[string]map[string]float64

func main() {
	bin := flag.String("test", "", "the compiled idemhttp test binary (go test -c ./idemhttp)")
	runs := flag.Int("runs", 15, "runs of the three sub-benchmarks")
	benchtime := flag.String("benchtime", "300ms", "each sub-benchmark's -test.benchtime")
	flag.Parse()
	if *bin == "" {
		log.Fatal("mwcost: -test is required")
	}
	var all []run
	for i := 0; i < *runs; i++ {
		out, err := exec.Command(*bin, "-test.run", "^$", "-test.bench", "^BenchmarkMiddleware$",
			"-test.benchtime", *benchtime, "-test.benchmem").CombinedOutput()
		if err != nil {
			log.Fatalf("mwcost: run %d: %v\n%s", i+1, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "BenchmarkMiddleware/") {
				fmt.Fprintln(os.Stderr, l)
			}
		}
		r, err := parse(bytes.NewReader(out))
		if err != nil {
			log.Fatalf("mwcost: run %d: %v", i+1, err)
		}
		all = append(all, r)
	}
	report(os.Stdout, all)
}

// parse reads one run's results: sub-benchmark name -> unit -> value, the
// units as go test prints them.
func parse(rd io.Reader) (run, error) {
	r := run{}
	br := benchfmt.NewReader(rd, "run")
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		_, parts := res.Name.Parts()
		if len(parts) == 0 {
			continue
		}
		sub := strings.TrimPrefix(string(parts[0]), "/")
		m := map[string]float64{}
		for _, v := range res.Values {
			unit := v.OrigUnit
			if unit == "" {
				unit = v.Unit
			}
			val := v.OrigValue
			if v.OrigUnit == "" {
				val = v.Value
			}
			m[unit] = val
		}
		r[sub] = m
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	for _, s := range []string{"baseline", "first", "replay"} {
		if r[s] == nil {
			return nil, fmt.Errorf("no result for %s", s)
		}
	}
	return r, nil
}

// over returns, per run, what sub adds to the baseline in unit.
func over(all []run, sub, unit string) results.Spread {
	var d []float64
	for _, r := range all {
		d = append(d, r[sub][unit]-r["baseline"][unit])
	}
	return results.Summarize(d)
}

// of returns sub's own figure in unit over the runs.
func of(all []run, sub, unit string) results.Spread {
	var xs []float64
	for _, r := range all {
		xs = append(xs, r[sub][unit])
	}
	return results.Summarize(xs)
}

func report(w io.Writer, all []run) {
	b := of(all, "baseline", "ns/op")
	fmt.Fprintf(w, "The bare handler: %.0f ns/op (median of %d runs, IQR %.0f-%.0f), %.0f allocations, %.0f CPU ns/op.\n\n",
		b.Median, b.N, b.Q1, b.Q3, of(all, "baseline", "allocs/op").Median, of(all, "baseline", "cpu-ns/op").Median)
	fmt.Fprintln(w, "| | + ns/op (median, IQR) | + CPU ns/op | + allocs | + B/op | goal | met |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|---|")
	for _, g := range goals {
		ns, allocs := over(all, g.name, "ns/op"), over(all, g.name, "allocs/op")
		met := "yes"
		if ns.Median > g.ns || allocs.Median > g.allocs {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %+.0f (%+.0f to %+.0f) | %+.0f | %+.0f | %+.0f | at most +%.0f ns and +%.0f allocations | %s |\n",
			g.name, ns.Median, ns.Q1, ns.Q3, over(all, g.name, "cpu-ns/op").Median, allocs.Median,
			over(all, g.name, "B/op").Median, g.ns, g.allocs, met)
	}
}
