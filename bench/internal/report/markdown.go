package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idem-dev/idem/bench/internal/results"
)

var scenarioOrder = []string{"first", "replay", "mix"}

var scenarioTitle = map[string]string{
	"first":  "first calls",
	"replay": "replays",
	"mix":    "90/10 mix",
}

var scenarioText = map[string]string{
	"first":  "Every request carries a new key: every request is a first execution (idem: reserve, run, complete).",
	"replay": "Every request retries one of %d keys that completed before the run: idem answers from the store and the operation does not run.",
	"mix":    "Nine requests in ten carry a new key, one in ten retries one of the %d known keys.",
}

// Write writes BENCHMARKS.md to mdPath and the charts into chartDir.
func Write(doc *results.Doc, mdPath, chartDir string) error {
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	files, err := charts(doc, chartDir, scenarioOrder)
	if err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(mdPath), chartDir)
	if err != nil {
		return err
	}
	img := func(key, alt string) string {
		if f, ok := files[key]; ok {
			return fmt.Sprintf("![%s](%s)\n\n", alt, filepath.ToSlash(filepath.Join(rel, f)))
		}
		return ""
	}
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	w("# Benchmarks\n\n")
	w("idem measured next to its baselines and the peers a user would pick instead, in one run on one machine. ")
	w("This file and the charts in `%s/` are written by the harness (`bench/`); do not edit them by hand. ", filepath.ToSlash(rel))
	w("The raw figures of every round are in [`%s/results.json`](%s/results.json).\n\n", filepath.ToSlash(rel), filepath.ToSlash(rel))
	w("Reproduce from a clean clone (Go, PostgreSQL and Redis running as `scripts/services.sh` starts them; the script installs the Node peers itself):\n\n")
	w("```sh\n%s\n```\n\n", doc.Command)
	w("Run of %s, %s long. ", doc.Started.Format("2006-01-02 15:04 MST"), doc.Finished.Sub(doc.Started).Round(time.Second))
	writeMachine(w, doc)
	writeGoals(w, doc)
	writeDuels(w, doc)
	writeBehind(w, doc)
	writeMethod(w, doc)
	for _, sc := range scenarioOrder {
		rs := rows(doc, sc)
		if len(rs) == 0 {
			continue
		}
		w("## Scenario: %s\n\n", scenarioTitle[sc])
		text := scenarioText[sc]
		if strings.Contains(text, "%d") {
			text = fmt.Sprintf(text, doc.Config.KnownKeys)
		}
		w("%s\n\n", text)
		writeScenarioTable(w, rs, sc == scenarioOrder[0])
		w("%s%s%s", img("throughput-"+sc, "throughput, "+scenarioTitle[sc]), img("latency-"+sc, "latency, "+scenarioTitle[sc]), img("rss-"+sc, "peak RSS, "+scenarioTitle[sc]))
	}
	writeRace(w, doc)
	writeCalls(w, doc)
	writeAppends(w, doc)
	writeFootprint(w, doc)
	writeScale(w, doc, img)
	w("%s", peersText)
	w("%s", profileText)
	if len(doc.Notes) > 0 {
		w("## Notes from this run\n\n")
		for _, n := range doc.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	return os.WriteFile(mdPath, b.Bytes(), 0o644)
}

func writeMachine(w func(string, ...any), doc *results.Doc) {
	m := doc.Machine
	w("Machine: %s, %d cores, %.0f GiB, %s; %s. ", m.CPU, m.Cores, m.MemoryGB, m.Kernel, strings.Join(m.Versions, ", "))
	w("Load average when the run started: %s", m.LoadAvg)
	w(" (other work on the machine, such as builds, lowers every figure; the ratios, taken within one round-robin run, suffer less).\n\n")
}

// writeBehind states, from the figures, where idem is behind.
func writeBehind(w func(string, ...any), doc *results.Doc) {
	w("## Where idem is behind\n\n")
	var lines []string
	for _, sc := range scenarioOrder {
		rs := rows(doc, sc)
		for _, r := range rs {
			if !isIdem(r.C) {
				continue
			}
			if x := ratio(rs, r); x > 0 && x < 1 {
				lines = append(lines, fmt.Sprintf("%s, %s: %.2fx the throughput of %s (%s vs %s req/s); p99 %s ms.",
					r.C.Name, scenarioTitle[sc], x, baselineName(doc, r.C.Baseline), num(r.Throughput), num(find(rs, r.C.Baseline).Throughput), ms(r.P99)))
			}
		}
		// Peers that beat idem's in-process middleware on the same store.
		for _, r := range rs {
			if r.C.Kind != "in-process" || isIdem(r.C) {
				continue
			}
			for _, m := range rs {
				if isIdem(m.C) && m.C.Kind == "in-process" && m.C.Store == r.C.Store && r.Throughput > m.Throughput {
					lines = append(lines, fmt.Sprintf("%s, %s: %s req/s against %s's %s (%.2fx).",
						r.C.Name, scenarioTitle[sc], num(r.Throughput), m.C.Name, num(m.Throughput), r.Throughput/m.Throughput))
				}
			}
		}
	}
	lines = append(lines, duelsBehind(doc)...)
	if len(lines) == 0 {
		w("In this run no idem contender fell below its baseline, and no peer outran idem's middleware on the same store.\n\n")
	} else {
		w("Every case in this run where an idem contender is slower than its baseline, or a peer outruns idem's middleware on the same store:\n\n")
		for _, l := range lines {
			w("- %s\n", l)
		}
		w("\nWhy, and what would close the gap: see [Profile](#profile-where-the-gateways-time-goes).\n\n")
	}
}

func writeMethod(w func(string, ...any), doc *results.Doc) {
	c := doc.Config
	w("## Method\n\n")
	w("- Each contender is its own process, started and stopped by the harness: peak RSS is the process's `VmHWM` (reset through `/proc/PID/clear_refs` before each scenario), so it covers the warm-up and the measured run of that scenario only.\n")
	w("- Proxy contenders (the plain `httputil.ReverseProxy` and idem's gateway) front the same trivial upstream, a Go net/http server whose `POST /charges` counts its executions per key and answers 43 bytes of JSON; they are compared with the plain proxy. In-process contenders (idem's middleware and the peers) run the same operation inside their own server; they are compared with the upstream called directly.\n")
	w("- Load: [vegeta](https://github.com/tsenart/vegeta)'s library at its maximum rate with %d workers over %d kept-alive connections (each worker sends its next request when its last is answered, as `wrk -c%d` does).", c.Connections, c.Connections, c.Connections)
	if len(doc.Runs) > 0 {
		w(" Each scenario runs a %s warm-up, then %s measured.", c.Warmup, c.Duration)
	}
	w("\n")
	if len(doc.Runs) > 0 {
		decided := "The goals are"
		if len(doc.Duels) > 0 {
			decided = "A goal without a duel is"
		}
		w("- %d rounds; each round runs every contender once, in turn (A B C ... A B C ...), so that drift on the machine spreads over all of them. Tables show the median of the rounds (the worst for correctness figures: success, executions per key). %s decided on the median of each round's own ratio (contender over baseline in the same round), and the range of those ratios is shown: on this shared machine a round can differ from the next by as much as the gap being measured.\n", c.Rounds, decided)
	}
	if len(doc.Duels) > 0 {
		w("- Duels decide the goals. On these shared cores the same process's CPU per request moves by 20-40%% from one few-second window to the next, so two runs even one round apart are not measured under the same conditions. In a duel the contender and its baseline run at the same time, each its own process on its own port (two proxies share one upstream), each with its own connections and keys. The load goes to one for %s, then to the other, in the order A B B A A B B A ..., %d pairs after one untimed slice each; the side that waits is idle. Two adjacent slices see nearly the same machine, so each pair gives one throughput ratio and one difference of CPU per request; alternating which side goes first cancels a steady drift. The goal is decided on the median ratio over the pairs, with the interquartile range (where the middle half of the pairs fell) beside it. A proxy's upstream works only for the side that has the load, so its CPU during a slice is charged to that side.\n", c.DuelSlice, c.DuelPairs)
	}
	w("- The load generator, the contender, the upstream and the stores share the machine's %d cores: a contender that needs less CPU per request leaves more to the others. Absolute figures are lower than a dedicated load machine would show; the ratios are the point.\n", doc.Machine.Cores)
	w("- Keys are UUID-shaped (36 characters), the only length gofiber's middleware accepts by default. Executions are counted by the process that runs the operation: the upstream behind a proxy, the contender itself otherwise.\n\n")
	w("| contender | kind | store | compared with | notes |\n|---|---|---|---|---|\n")
	for _, ct := range doc.Contenders {
		notes := ct.Notes
		if ct.Skipped != "" {
			notes = "**did not run**: " + ct.Skipped
		}
		w("| %s | %s | %s | %s | %s |\n", ct.Name, ct.Kind, ct.Store, baselineName(doc, ct.Baseline), notes)
	}
	w("\n")
}

func writeScenarioTable(w func(string, ...any), rs []row, explain bool) {
	w("| contender | kind | req/s | x proxy | x upstream | x own baseline | p50 ms | p99 ms | p99.9 ms | peak RSS MiB | CPU µs/req | + CPU µs/req over baseline | executions | max exec/key | 2xx |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		// The ratio that compares like with like is in bold: proxies
		// against the plain proxy, in-process servers against the
		// upstream called directly.
		cell := func(id string) string {
			v := ratioTo(rs, r, id)
			if v == 0 || r.C.ID == id {
				return "-"
			}
			if id == r.C.Baseline {
				return fmt.Sprintf("**%.2fx**", v)
			}
			return fmt.Sprintf("%.2fx", v)
		}
		own, extra := "-", "-"
		if b := find(rs, r.C.Baseline); b != nil && b.Throughput > 0 {
			own = fmt.Sprintf("%.2fx", r.Throughput/b.Throughput)
			extra = fmt.Sprintf("%+.0f", r.CPU-b.CPU)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %s | %d | %d | %s |\n",
			r.C.Name, r.C.Kind, num(r.Throughput), cell("proxy"), cell("upstream"), own, ms(r.P50), ms(r.P99), ms(r.P999),
			r.RSSMiB, r.CPU, extra, r.Executions, r.MaxPerKey, pct(r.Success, r.Status))
	}
	if !explain {
		w("\n")
		return
	}
	w("\n\"x proxy\" and \"x upstream\" are the throughput over the plain proxy's and over the upstream's called directly; the one in bold compares like with like (proxies with the plain proxy, in-process servers with the upstream). \"CPU µs/req\" is the contender process's own CPU time per request (not the upstream's, the store server's or the load generator's): on two shared cores, what one process burns the others lack. \"executions\" counts the operation's runs during one measured run (median of rounds); \"max exec/key\" is the most runs of one key in any round.\n\n")
}

func writeRace(w func(string, ...any), doc *results.Doc) {
	rr := raceRows(doc)
	if len(rr) == 0 {
		return
	}
	c := doc.Config
	w("## Race: many clients, same keys\n\n")
	w("%d keys, each sent by %d concurrent requests (all %d at once, over connections opened beforehand), the operation taking %s so that they overlap; then the executions of each key are read from the process that runs the operation. Idempotency means exactly 1 per key. Repeated in every round.\n\n",
		c.RaceKeys, c.RacePerKey, c.RaceKeys*c.RacePerKey, c.RaceDelay)
	w("| contender | kind | requests | executions per key (max) | (min) | statuses | verdict |\n|---|---|---:|---:|---:|---|---|\n")
	for _, r := range rr {
		verdict := "exactly once"
		switch {
		case r.C.Kind == "baseline":
			verdict = "no idempotency (baseline)"
		case r.MaxExec > 1:
			verdict = "**ran a key more than once**"
		case r.MinExec < 1:
			verdict = "**a key never ran**"
		}
		w("| %s | %s | %d | %d | %d | %s | %s |\n", r.C.Name, r.C.Kind, r.Requests, r.MaxExec, r.MinExec, statuses(r.Status), verdict)
	}
	w("\nA 409 is the answer to a request whose key is still running elsewhere (idem's default `wait: 0`); gofiber's middleware instead holds such a request until the first finishes and then replays it.\n\n")
}

func writeScale(w func(string, ...any), doc *results.Doc, img func(string, string) string) {
	if len(doc.Scale) == 0 && len(doc.Cleanup) == 0 {
		return
	}
	w("## Scale: live and expired keys\n\n")
	w("The stores measured directly through idem's store interface, without HTTP, one client (so latency, not queueing). Live records are reservations that expire in 24 h, loaded through the store's own `Reserve` (512 at a time) for the embedded store and Redis, and by `INSERT ... SELECT generate_series` in the table's own layout for PostgreSQL. Scale mode `%s`", doc.Config.Scale)
	if doc.Config.Scale != "full" {
		w(" (10^7 live keys on PostgreSQL: `BENCH_SCALE=full bench/run.sh`)")
	}
	w(".\n\n")
	if len(doc.Scale) > 0 {
		w("| store | operation | live keys | p50 ms | p99 ms | p99.9 ms | samples | time to load |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range doc.Scale {
			w("| %s | %s | %s | %.3f | %.3f | %.3f | %d | %.1f s |\n", l.Store, l.Op, count(l.LiveKeys), l.P50, l.P99, l.P999, l.Samples, l.LoadSeconds)
		}
		w("\n%s%s", img("scale-new", "reserve latency of a new key against live keys"), img("scale-existing", "reserve latency of an existing key against live keys"))
	}
	if len(doc.Cleanup) > 0 {
		w("Cleanup: the given number of expired records is added among the live ones, then one `Cleanup` call deletes them. Flat cost means time per deleted record that does not change with the number of live keys.\n\n")
		w("| store | live keys | expired | deleted | seconds | µs per record |\n|---|---:|---:|---:|---:|---:|\n")
		cl := slices.Clone(doc.Cleanup)
		sort.SliceStable(cl, func(i, j int) bool { return cl[i].Store < cl[j].Store })
		for _, c := range cl {
			per := "-"
			if c.Deleted > 0 {
				per = fmt.Sprintf("%.1f", c.Seconds*1e6/float64(c.Deleted))
			}
			note := ""
			if c.Note != "" {
				note = " (" + c.Note + ")"
			}
			exp := count(c.Expired)
			if c.Note != "" {
				exp = "-"
			}
			w("| %s%s | %s | %s | %d | %.3f | %s |\n", c.Store, note, count(c.LiveKeys), exp, c.Deleted, c.Seconds, per)
		}
		w("\n%s", img("cleanup", "cleanup time against expired records"))
	}
}

func baselineName(doc *results.Doc, id string) string {
	for _, c := range doc.Contenders {
		if c.ID == id {
			return c.Name
		}
	}
	if id == "" {
		return "-"
	}
	return id
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// num formats a rate with thousands separators.
func num(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func pct(success float64, st map[string]int) string {
	s := fmt.Sprintf("%.1f%%", 100*success)
	if success < 1 {
		s += " (" + statuses(st) + ")"
	}
	return s
}

// statuses formats a status histogram, "0" being transport errors.
func statuses(st map[string]int) string {
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		name := k
		if k == "0" {
			name = "error"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, st[k]))
	}
	return strings.Join(parts, ", ")
}
