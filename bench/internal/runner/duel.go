package runner

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/bench/internal/contender"
	"github.com/idem-dev/idem/bench/internal/goal"
	"github.com/idem-dev/idem/bench/internal/load"
	"github.com/idem-dev/idem/bench/internal/proc"
	"github.com/idem-dev/idem/bench/internal/results"
)

// Duels runs the duels of goal.Duels whose two contenders and scenario are
// selected (opts.Only, opts.Scenarios), and adds them to doc. A contender's
// throughput drifts by tens of percent from one few-second window to the
// next on this shared machine; two processes fed in turn, a second or so
// each, see the same machine state, so their ratio is what the goals need.
func Duels(ctx context.Context, opts Options, doc *results.Doc) error {
	byID := map[string]contender.Contender{}
	for _, c := range contender.All() {
		byID[c.ID] = c
	}
	for _, d := range goal.Duels() {
		if !duelSelected(opts, d) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c, okC := byID[d.Contender]
		b, okB := byID[d.Baseline]
		if !okC || !okB {
			return fmt.Errorf("duel %s vs %s: no such contender", d.Contender, d.Baseline)
		}
		dopts := opts
		if d.Conns > 0 {
			dopts.Connections = d.Conns
		}
		log.Printf("duel: %s vs %s, %s, %d clients (%d pairs of %s slices)", c.Name, b.Name, d.Scenario, dopts.Connections, opts.DuelPairs, opts.DuelSlice)
		res, err := runDuel(ctx, dopts, c, b, load.Scenario(d.Scenario))
		if err != nil {
			log.Printf("  duel failed: %v", err)
			doc.Notes = append(doc.Notes, fmt.Sprintf("duel %s vs %s (%s): %v", c.Name, b.Name, d.Scenario, err))
			continue
		}
		logDuel(res)
		doc.Duels = append(doc.Duels, res)
		addContender(doc, c)
		addContender(doc, b)
	}
	return nil
}

func duelSelected(opts Options, d goal.Duel) bool {
	if len(opts.Only) > 0 && !(slices.Contains(opts.Only, d.Contender) && slices.Contains(opts.Only, d.Baseline)) {
		return false
	}
	return len(opts.Scenarios) == 0 || slices.Contains(opts.Scenarios, load.Scenario(d.Scenario))
}

// addContender lists c in doc unless the rounds did already, so that a
// report of duels alone still names what it measured.
func addContender(doc *results.Doc, c contender.Contender) {
	if !slices.ContainsFunc(doc.Contenders, func(x results.Contender) bool { return x.ID == c.ID }) {
		doc.Contenders = append(doc.Contenders, c.Contender)
	}
}

// duelSide is one of a duel's two processes with its own load: its own
// connections, kept warm between its slices, and its own keys.
type duelSide struct {
	c      contender.Contender
	p      *proc.Proc
	client *http.Client
	req    load.Request
	fresh  *load.Keys
	known  load.Known
	// busy is the CPU time the process spent in its own slices.
	busy time.Duration
}

// side indexes a duel's sides.
type side int

const (
	contenderSide side = iota
	baselineSide
)

// runDuel starts c and its baseline b side by side (and the one upstream
// they share, if they proxy), then alternates sc's load between them.
func runDuel(ctx context.Context, opts Options, c, b contender.Contender, sc load.Scenario) (results.Duel, error) {
	res := results.Duel{Contender: c.ID, Baseline: b.ID, Scenario: string(sc), Conns: opts.Connections, Slice: opts.DuelSlice}
	dir, err := freshDir(filepath.Join(opts.Work, fmt.Sprintf("duel-%s-%s-%s-c%d", c.ID, b.ID, sc, opts.Connections)))
	if err != nil {
		return res, err
	}
	// Once both are stopped (deferred below), their records go: the
	// embedded store's files with the duel, the shared stores' as Run
	// leaves them after the rounds. The logs stay for a post-mortem.
	for _, x := range []contender.Contender{c, b} {
		defer os.RemoveAll(filepath.Join(dir, x.ID, "idem-data"))
		defer func() { _ = emptyStore(context.WithoutCancel(ctx), opts.Setup, x) }()
	}
	var g proc.Group
	defer g.StopAll()
	var up *proc.Proc
	if c.NeedsUpstream || b.NeedsUpstream {
		if up, err = startUpstream(opts.Setup, dir, &g); err != nil {
			return res, err
		}
	}
	// The baseline gets a copy of the setup with its own ports.
	bs := opts.Setup
	bs.Listen, bs.Admin = opts.DuelListen, opts.DuelAdmin
	var sides [2]*duelSide
	for i, x := range []struct {
		c contender.Contender
		s contender.Setup
	}{{c, opts.Setup}, {b, bs}} {
		if sides[i], err = startSide(ctx, opts, x.c, x.s, dir, sc, &g); err != nil {
			return res, err
		}
		defer sides[i].client.CloseIdleConnections()
	}

	run := func(s side) (results.Slice, error) {
		if err := ctx.Err(); err != nil {
			return results.Slice{}, err
		}
		return sides[s].slice(sc, opts.Connections, opts.DuelSlice, up)
	}
	cpu0, err := sideCPU(sides)
	if err != nil {
		return res, err
	}
	// Warm-up: one untimed slice each, so that neither side's first slice
	// pays for connections, caches or a heap still growing.
	for _, s := range []side{contenderSide, baselineSide} {
		if _, err := run(s); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	machine := readActivity()
	if res.Pairs, err = interleave(opts.DuelPairs, run); err != nil {
		return res, err
	}
	log.Printf("  machine over the pairs: %s", machine.since())
	for _, sd := range sides {
		if ended, err := sd.p.Exited(); ended {
			return res, fmt.Errorf("%s exited during the duel: %v", sd.c.ID, err)
		}
	}
	cpu1, err := sideCPU(sides)
	if err != nil {
		return res, err
	}
	// What a process burns while the other has the load (a store's
	// background work) is charged to no slice: say how much it was.
	for i, sd := range sides {
		total := cpu1[i] - cpu0[i]
		log.Printf("  %s: %s of CPU over the duel, %s of it outside its own slices", sd.c.ID, total, total-sd.busy)
	}
	return res, nil
}

// sideCPU reads the CPU time of both sides' processes.
func sideCPU(sides [2]*duelSide) ([2]time.Duration, error) {
	var out [2]time.Duration
	for i, sd := range sides {
		t, err := cpuTime(sd.p)
		if err != nil {
			return out, err
		}
		out[i] = t
	}
	return out, nil
}

// abba returns the order of the sides in pair i: contender first in even
// pairs, baseline first in odd ones (A B B A A B B A ...), so that over
// every two pairs each side holds the same mean position in time and a
// drift linear in time weighs on both alike.
func abba(i int) [2]side {
	if i%2 == 0 {
		return [2]side{contenderSide, baselineSide}
	}
	return [2]side{baselineSide, contenderSide}
}

// interleave measures n pairs of slices, the sides in abba order, and pairs
// each contender slice with the baseline slice next to it in time.
func interleave(n int, run func(side) (results.Slice, error)) ([]results.Pair, error) {
	pairs := make([]results.Pair, 0, n)
	for i := range n {
		order := abba(i)
		var got [2]results.Slice
		for _, s := range order {
			sl, err := run(s)
			if err != nil {
				return pairs, fmt.Errorf("pair %d: %w", i+1, err)
			}
			got[s] = sl
		}
		pairs = append(pairs, results.NewPair(got[contenderSide], got[baselineSide], order[0] == contenderSide))
	}
	return pairs, nil
}

func startUpstream(s contender.Setup, dir string, g *proc.Group) (*proc.Proc, error) {
	up, err := proc.Start("upstream", contender.UpstreamArgv(s), nil, dir, filepath.Join(dir, "upstream.log"))
	if err != nil {
		return nil, err
	}
	g.Add(up)
	return up, up.WaitHTTP("http://"+s.Upstream+app.PathHealth, 10*time.Second)
}

// startContender starts c with setup s, its files in dir and its log in
// logDir, and waits until it answers.
func startContender(c contender.Contender, s contender.Setup, dir, logDir string, g *proc.Group) (*proc.Proc, error) {
	var env []string
	if c.Env != nil {
		env = c.Env(s)
	}
	p, err := proc.Start(c.ID, c.Argv(s, dir), env, dir, filepath.Join(logDir, c.ID+".log"))
	if err != nil {
		return nil, err
	}
	g.Add(p)
	return p, p.WaitHTTP("http://"+s.Listen+app.PathHealth, 30*time.Second)
}

// startSide empties c's store, starts c with setup s in a directory of its
// own under dir, and preloads its known keys when sc retries them.
func startSide(ctx context.Context, opts Options, c contender.Contender, s contender.Setup, dir string,
	sc load.Scenario, g *proc.Group) (*duelSide, error) {
	if err := emptyStore(ctx, s, c); err != nil {
		return nil, err
	}
	sdir := filepath.Join(dir, c.ID)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return nil, err
	}
	p, err := startContender(c, s, sdir, dir, g)
	if err != nil {
		return nil, err
	}
	base := "http://" + s.Listen
	sd := &duelSide{
		c: c, p: p, client: load.NewClient(opts.Connections),
		req:   load.Request{URL: base, KeyHeader: c.KeyHeader},
		fresh: load.NewKeys(), known: load.Known{Keys: load.NewKeys(), N: uint64(opts.KnownKeys)},
	}
	if sc != load.First {
		if err := preload(sd.client, sd.req, sd.known); err != nil {
			sd.client.CloseIdleConnections()
			return nil, fmt.Errorf("%s: %w", c.ID, err)
		}
	}
	return sd, nil
}

// slice sends sc's load to this side for d and charges it the CPU its
// process, and the shared upstream if any, spent meanwhile: the other
// side is idle, so the upstream's work is this side's.
func (sd *duelSide) slice(sc load.Scenario, conns int, d time.Duration, up *proc.Proc) (results.Slice, error) {
	cpu0, up0, err := cpuTimes(sd.p, up)
	if err != nil {
		return results.Slice{}, err
	}
	m := load.Attack(sd.client, load.Targeter(sc, sd.req, sd.fresh, sd.known), conns, d)
	cpu1, up1, err := cpuTimes(sd.p, up)
	if err != nil {
		return results.Slice{}, err
	}
	sd.busy += cpu1 - cpu0
	s := results.Slice{Requests: m.Requests, Throughput: m.Throughput, Success: m.Success}
	if m.Requests > 0 {
		s.CPUPerReq = perReq(cpu1-cpu0, m.Requests)
		s.UpstreamCPUPerReq = perReq(up1-up0, m.Requests)
	}
	return s, nil
}

// cpuTimes reads the CPU time of a duel side's process and of the shared
// upstream (0 when there is none).
func cpuTimes(p, up *proc.Proc) (own, upstream time.Duration, err error) {
	if own, err = cpuTime(p); err == nil {
		upstream, err = cpuTime(up)
	}
	return own, upstream, err
}

// cpuTime is p's CPU time, or 0 when there is no p.
func cpuTime(p *proc.Proc) (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	t, err := p.CPUTime()
	if err != nil {
		return 0, fmt.Errorf("%s CPU time: %w", p.Name, err)
	}
	return t, nil
}

func perReq(cpu time.Duration, reqs uint64) float64 {
	return float64(cpu) / float64(time.Microsecond) / float64(reqs)
}

// logDuel prints a duel's figures as the report will judge them.
func logDuel(d results.Duel) {
	r, cpu, upCPU := results.Summarize(d.Ratios()), results.Summarize(d.CPUDiffs()), results.Summarize(d.UpstreamCPUDiffs())
	var cs, bs []float64
	for i, p := range d.Pairs {
		cs, bs = append(cs, p.Contender.CPUPerReq), append(bs, p.Baseline.CPUPerReq)
		order := "A B"
		if !p.ContenderFirst {
			order = "B A"
		}
		log.Printf("  pair %2d (%s) %8.0f vs %8.0f req/s  %.3fx  cpu %4.0f vs %4.0f µs/req  upstream %3.0f vs %3.0f",
			i+1, order, p.Contender.Throughput, p.Baseline.Throughput, p.Ratio,
			p.Contender.CPUPerReq, p.Baseline.CPUPerReq, p.Contender.UpstreamCPUPerReq, p.Baseline.UpstreamCPUPerReq)
	}
	log.Printf("  %s/%s %s c%d: %.2fx median of %d pairs (IQR %.2f-%.2f); CPU µs/req %.0f vs %.0f, %+.1f median of pair differences (IQR %+.1f to %+.1f); upstream %+.1f",
		d.Contender, d.Baseline, d.Scenario, d.Conns, r.Median, r.N, r.Q1, r.Q3,
		results.Summarize(cs).Median, results.Summarize(bs).Median, cpu.Median, cpu.Q1, cpu.Q3, upCPU.Median)
}
