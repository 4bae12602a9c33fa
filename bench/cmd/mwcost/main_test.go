package main

import (
	"strings"
	"testing"
)

// Two runs in go test's format; the second is a slow period of the
// machine: its overheads, taken within the run, are what count.
const runs = `goos: linux
BenchmarkMiddleware/baseline-2   100  2000 ns/op  3500 cpu-ns/op  6600 B/op  23 allocs/op
BenchmarkMiddleware/first-2      100  5500 ns/op  9900 cpu-ns/op  9700 B/op  44 allocs/op
BenchmarkMiddleware/replay-2     100  3900 ns/op  7000 cpu-ns/op  7200 B/op  31 allocs/op
PASS
---
BenchmarkMiddleware/baseline-2   100  3000 ns/op  5200 cpu-ns/op  6600 B/op  23 allocs/op
BenchmarkMiddleware/first-2      100  6700 ns/op 11700 cpu-ns/op  9700 B/op  44 allocs/op
BenchmarkMiddleware/replay-2     100  5100 ns/op  8800 cpu-ns/op  7200 B/op  31 allocs/op
`

func TestReport(t *testing.T) {
	var all []run
	for _, part := range strings.Split(runs, "---\n") {
		r, err := parse(strings.NewReader(part))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if got := over(all, "first", "ns/op"); got.Median != 3600 || got.Q1 != 3550 || got.Q3 != 3650 {
		t.Errorf("first overhead = %+v, want median 3600 between 3500 and 3700", got)
	}
	if got := over(all, "replay", "allocs/op"); got.Median != 8 {
		t.Errorf("replay allocations = %v, want 8", got.Median)
	}
	var b strings.Builder
	report(&b, all)
	for _, want := range []string{
		"| first | +3600 (+3550 to +3650) | +6450 | +21 | +3100 | at most +4000 ns and +25 allocations | yes |",
		"| replay | +2000 (+1950 to +2050) | +3550 | +8 | +600 | at most +2000 ns and +10 allocations | yes |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestParseNeedsAllThree(t *testing.T) {
	_, err := parse(strings.NewReader("BenchmarkMiddleware/baseline-2 100 2000 ns/op\n"))
	if err == nil {
		t.Fatal("a run without first and replay parsed")
	}
}
