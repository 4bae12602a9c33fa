// Package results holds what a harness run measured, saved as JSON so that
// the report (BENCHMARKS.md and its charts) can be rebuilt without
// measuring again.
package results

import (
	"encoding/json"
	"os"
	"time"
)

// Doc is one harness run.
type Doc struct {
	Machine    Machine     `json:"machine"`
	Command    string      `json:"command"`
	Config     Config      `json:"config"`
	Started    time.Time   `json:"started"`
	Finished   time.Time   `json:"finished"`
	Contenders []Contender `json:"contenders"`
	Runs       []Run       `json:"runs"`
	Races      []Race      `json:"races"`
	Duels      []Duel      `json:"duels,omitempty"`
	Calls      []CallDuel  `json:"calls,omitempty"`
	// Appends are the file store's log against one synced append of the
	// same bytes, store level (BenchmarkAnchor), one per writer count.
	Appends   []CallDuel  `json:"appends,omitempty"`
	Footprint []Footprint `json:"footprint,omitempty"`
	Churn     []Churn     `json:"churn,omitempty"`
	Scale     []Latency   `json:"scale"`
	Cleanup   []Cleanup   `json:"cleanup"`
	// Notes are things the run noticed (a contender that failed to
	// start, a busy machine), printed in the report.
	Notes []string `json:"notes"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU      string   `json:"cpu"`
	Cores    int      `json:"cores"`
	MemoryGB float64  `json:"memory_gb"`
	Kernel   string   `json:"kernel"`
	Versions []string `json:"versions"` // "go1.26.8", "node v20...", ...
	// LoadAvg is /proc/loadavg before the run: other work on the machine.
	LoadAvg string `json:"load_avg"`
}

// Config is the run's settings.
type Config struct {
	Rounds      int           `json:"rounds"`
	Duration    time.Duration `json:"duration"`
	Warmup      time.Duration `json:"warmup"`
	Connections int           `json:"connections"`
	KnownKeys   int           `json:"known_keys"`
	RaceKeys    int           `json:"race_keys"`
	RacePerKey  int           `json:"race_per_key"`
	RaceDelay   time.Duration `json:"race_delay"`
	Scale       string        `json:"scale"`
	// DuelSlice and DuelPairs: each duel's slice of load and number of
	// A B pairs.
	DuelSlice time.Duration `json:"duel_slice,omitempty"`
	DuelPairs int           `json:"duel_pairs,omitempty"`
}

// Contender describes one contender as the report shows it.
type Contender struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Kind  string `json:"kind"` // "baseline", "proxy" or "in-process"
	Store string `json:"store"`
	// Baseline is the ID of the contender its ratios are taken against.
	Baseline string `json:"baseline"`
	Notes    string `json:"notes"`
	// Skipped says why the contender did not run, when it did not.
	Skipped string `json:"skipped,omitempty"`
}

// Run is one contender under one load scenario in one round.
type Run struct {
	Contender  string         `json:"contender"`
	Scenario   string         `json:"scenario"`
	Round      int            `json:"round"`
	Requests   uint64         `json:"requests"`
	Seconds    float64        `json:"seconds"`
	Throughput float64        `json:"throughput"` // 2xx responses per second
	Success    float64        `json:"success"`    // fraction of 2xx
	Status     map[string]int `json:"status"`
	P50        float64        `json:"p50_ms"`
	P99        float64        `json:"p99_ms"`
	P999       float64        `json:"p999_ms"`
	Max        float64        `json:"max_ms"`
	PeakRSSKB  int64          `json:"peak_rss_kb"`
	// CPUPerReq is the contender process's CPU time per request, in µs;
	// UpstreamCPUPerReq the upstream's, for proxies.
	CPUPerReq         float64 `json:"cpu_us_per_req"`
	UpstreamCPUPerReq float64 `json:"upstream_cpu_us_per_req,omitempty"`
	// Executions of the operation during the run, as the process that
	// runs it counted them, and per key.
	Executions int64    `json:"executions"`
	ExecKeys   int      `json:"exec_keys"`
	MaxPerKey  int64    `json:"max_per_key"`
	Errors     []string `json:"errors,omitempty"`
}

// Race is the race scenario for one contender in one round.
type Race struct {
	Contender string         `json:"contender"`
	Round     int            `json:"round"`
	Keys      int            `json:"keys"`
	PerKey    int            `json:"per_key"`
	Status    map[string]int `json:"status"`
	// MaxExec and MinExec are the most and fewest executions of one key.
	MaxExec    int64    `json:"max_exec"`
	MinExec    int64    `json:"min_exec"`
	Executions int64    `json:"executions"`
	Errors     []string `json:"errors,omitempty"`
}

// Latency is a store operation's latency with LiveKeys records present.
type Latency struct {
	Store    string  `json:"store"`
	Op       string  `json:"op"` // "reserve new key", "reserve existing key"
	LiveKeys int     `json:"live_keys"`
	Samples  int     `json:"samples"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	P999     float64 `json:"p999_ms"`
	// LoadSeconds is how long loading the store up to LiveKeys took.
	LoadSeconds float64 `json:"load_seconds"`
}

// Cleanup is one Cleanup call over Expired expired records among LiveKeys
// live ones.
type Cleanup struct {
	Store    string  `json:"store"`
	LiveKeys int     `json:"live_keys"`
	Expired  int     `json:"expired"`
	Deleted  int     `json:"deleted"`
	Seconds  float64 `json:"seconds"`
	// Note explains a store whose cleanup is not comparable (Redis
	// expires records itself).
	Note string `json:"note,omitempty"`
}

// Save writes d to path as indented JSON.
func (d *Doc) Save(path string) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Load reads a Doc saved by Save.
func Load(path string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Doc
	return &d, json.Unmarshal(b, &d)
}
