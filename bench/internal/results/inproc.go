package results

// CallDuel is two sides of a Go benchmark run in turn, each run its own
// process, in the order A B B A ...: idem's middleware and the reference
// (per call CPU, allocations and bytes), or the file store's log and one
// synced append of the same bytes (pairs per second), pair by pair.
type CallDuel struct {
	Contender string `json:"contender"`
	Baseline  string `json:"baseline"`
	Scenario  string `json:"scenario"`
	Calls     int    `json:"calls"` // per run
	// Writers and Benchtime: a store-level duel's concurrency and each
	// run's -test.benchtime.
	Writers   int        `json:"writers,omitempty"`
	Benchtime string     `json:"benchtime,omitempty"`
	Pairs     []CallPair `json:"pairs"`
}

// CallPair is one run of each side, adjacent in time.
type CallPair struct {
	ContenderFirst bool       `json:"contender_first"`
	Contender      CallFigure `json:"contender"`
	Baseline       CallFigure `json:"baseline"`
}

// CallFigure is one benchmark run's figures per call.
type CallFigure struct {
	NsPerOp    float64 `json:"ns_per_op"`
	CPUNsPerOp float64 `json:"cpu_ns_per_op"`
	AllocsOp   float64 `json:"allocs_per_op"`
	BytesOp    float64 `json:"bytes_per_op"`
	// PerSec is the benchmark's own rate (pairs/s of store/file's
	// BenchmarkAnchor), 0 when it reports none.
	PerSec float64 `json:"per_sec,omitempty"`
	// PerSync is how many pairs an fdatasync covered (BenchmarkAnchor's
	// pairs/sync), 0 when not reported.
	PerSync float64 `json:"per_sync,omitempty"`
}

// Diffs returns f(contender) - f(baseline) for each pair.
func (d CallDuel) Diffs(f func(CallFigure) float64) []float64 {
	out := make([]float64, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		out = append(out, f(p.Contender)-f(p.Baseline))
	}
	return out
}

// Ratios returns f(contender) / f(baseline) for each pair whose baseline
// is not 0.
func (d CallDuel) Ratios(f func(CallFigure) float64) []float64 {
	out := make([]float64, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		if b := f(p.Baseline); b != 0 {
			out = append(out, f(p.Contender)/b)
		}
	}
	return out
}

// Side returns f over one side's runs (contender when c).
func (d CallDuel) Side(c bool, f func(CallFigure) float64) []float64 {
	out := make([]float64, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		if c {
			out = append(out, f(p.Contender))
		} else {
			out = append(out, f(p.Baseline))
		}
	}
	return out
}
