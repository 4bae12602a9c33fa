package runner

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idem-dev/idem/bench/internal/contender"
	"github.com/idem-dev/idem/bench/internal/load"
	"github.com/idem-dev/idem/bench/internal/proc"
	"github.com/idem-dev/idem/bench/internal/results"
)

// runOne starts c (and the upstream it fronts), runs the scenarios and the
// race against it, and stops everything it started.
func runOne(ctx context.Context, opts Options, c contender.Contender, round int, scenarios []load.Scenario) ([]results.Run, *results.Race, error) {
	s := opts.Setup
	dir, err := workDir(opts.Work, c.ID, round)
	if err != nil {
		return nil, nil, err
	}
	// The contender's files (the embedded store) go away with its round;
	// its log stays for a post-mortem.
	defer os.RemoveAll(filepath.Join(dir, "idem-data"))
	if err := emptyStore(ctx, s, c); err != nil {
		return nil, nil, err
	}

	var g proc.Group
	defer g.StopAll()
	base := "http://" + s.Listen
	countsURL := base
	var up *proc.Proc
	if c.NeedsUpstream {
		if up, err = startUpstream(s, dir, &g); err != nil {
			return nil, nil, err
		}
		countsURL = "http://" + s.Upstream
	}
	p, err := startContender(c, s, dir, dir, &g)
	if err != nil {
		return nil, nil, err
	}

	req := load.Request{URL: base, KeyHeader: c.KeyHeader}
	client := load.NewClient(opts.Connections)
	defer client.CloseIdleConnections()
	known := load.Known{Keys: load.NewKeys(), N: uint64(opts.KnownKeys)}
	preloaded := false
	var runs []results.Run
	for _, sc := range scenarios {
		if sc != load.First && !preloaded {
			if err := preload(client, req, known); err != nil {
				return nil, nil, err
			}
			preloaded = true
		}
		run, err := measure(ctx, opts, p, up, client, req, countsURL, sc, known)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", sc, err)
		}
		run.Contender, run.Round = c.ID, round
		log.Printf("  %-7s %8.0f req/s  p50 %6.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  rss %6.1f MiB  cpu %4.0f µs/req  exec/key max %d  ok %.1f%%",
			sc, run.Throughput, run.P50, run.P99, run.P999, float64(run.PeakRSSKB)/1024, run.CPUPerReq, run.MaxPerKey, 100*run.Success)
		runs = append(runs, run)
	}
	race, err := runRace(opts, req, countsURL)
	if err != nil {
		return nil, nil, fmt.Errorf("race: %w", err)
	}
	race.Contender, race.Round = c.ID, round
	log.Printf("  race    executions per key: max %d min %d; statuses %v", race.MaxExec, race.MinExec, race.Status)
	if ended, err := p.Exited(); ended {
		return nil, nil, fmt.Errorf("%s exited during the run: %v", c.ID, err)
	}
	return runs, race, nil
}

// preload sends each known key once, so that the replay and mix scenarios
// find them completed.
func preload(client *http.Client, req load.Request, known load.Known) error {
	m := load.Attack(client, load.Finite(req, known), 16, 0)
	if m.Requests != known.N || m.Success < 1 {
		return fmt.Errorf("preloading %d keys: %d requests, %.1f%% success, statuses %v, errors %v",
			known.N, m.Requests, 100*m.Success, m.StatusCodes, firstErrors(m))
	}
	return nil
}

// measure runs one scenario: a warm-up, then the measured run, with the
// peak RSS and the executions of the measured run alone.
func measure(ctx context.Context, opts Options, p, up *proc.Proc, client *http.Client, req load.Request,
	countsURL string, sc load.Scenario, known load.Known) (results.Run, error) {
	fresh := load.NewKeys()
	if opts.Warmup > 0 {
		load.Attack(client, load.Targeter(sc, req, fresh, known), opts.Connections, opts.Warmup)
	}
	if err := load.ResetCounts(countsURL); err != nil {
		return results.Run{}, err
	}
	rssErr := p.ResetPeakRSS()
	cpu0, cpuErr := p.CPUTime()
	var upCPU0 time.Duration
	if up != nil {
		upCPU0, _ = up.CPUTime()
	}
	machine := readActivity()
	m := load.Attack(client, load.Targeter(sc, req, fresh, known), opts.Connections, opts.Duration)
	cpu1, _ := p.CPUTime()
	log.Printf("  %-7s machine: %s", sc, machine.since())
	var upCPU1 time.Duration
	if up != nil {
		upCPU1, _ = up.CPUTime()
	}
	run := results.Run{
		Scenario:   string(sc),
		Requests:   m.Requests,
		Seconds:    (m.Duration + m.Wait).Seconds(),
		Throughput: m.Throughput,
		Success:    m.Success,
		Status:     m.StatusCodes,
		P50:        ms(m.Latencies.P50),
		P99:        ms(m.Latencies.P99),
		P999:       ms(m.Latencies.Quantile(0.999)),
		Max:        ms(m.Latencies.Max),
		Errors:     firstErrors(m),
	}
	if rssErr == nil {
		run.PeakRSSKB, _ = p.PeakRSS()
	}
	if cpuErr == nil && m.Requests > 0 {
		// CPU per request explains much on a shared 2-core machine: what
		// one contender burns, the load generator and upstream lack.
		run.CPUPerReq = perReq(cpu1-cpu0, m.Requests)
		run.UpstreamCPUPerReq = perReq(upCPU1-upCPU0, m.Requests)
	}
	counts, err := load.Counts(countsURL, false)
	if err != nil {
		return run, err
	}
	run.Executions, run.ExecKeys, run.MaxPerKey = counts.Executions, counts.Keys, counts.MaxPerKey
	return run, ctx.Err()
}

// runRace sends RaceKeys keys RacePerKey times each, all at once, and
// counts how many times each key ran.
func runRace(opts Options, req load.Request, countsURL string) (*results.Race, error) {
	n := opts.RaceKeys * opts.RacePerKey
	client := load.NewClient(n)
	defer client.CloseIdleConnections()
	load.Warm(client, req.URL, n)
	if err := load.ResetCounts(countsURL); err != nil {
		return nil, err
	}
	ks := load.NewKeys()
	m := load.Attack(client, load.RaceTargeter(req, ks, opts.RaceKeys, opts.RacePerKey, opts.RaceDelay), n, 0)
	counts, err := load.Counts(countsURL, true)
	if err != nil {
		return nil, err
	}
	r := &results.Race{Keys: opts.RaceKeys, PerKey: opts.RacePerKey, Status: m.StatusCodes, Executions: counts.Executions, Errors: firstErrors(m)}
	r.MinExec = -1
	for i := range uint64(opts.RaceKeys) {
		e := counts.PerKey[ks.Key(i)]
		r.MaxExec = max(r.MaxExec, e)
		if r.MinExec < 0 || e < r.MinExec {
			r.MinExec = e
		}
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// firstErrors returns a few of the transport errors of a run, sorted.
func firstErrors(m *vegeta.Metrics) []string {
	errs := append([]string(nil), m.Errors...)
	sort.Strings(errs)
	return errs[:min(len(errs), 5)]
}
