// Command bench runs idem next to its baselines and peers on this machine
// and writes BENCHMARKS.md with its charts. bench/run.sh builds what it
// needs and runs it; see BENCHMARKS.md for the exact command.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idem-dev/idem/bench/internal/contender"
	"github.com/idem-dev/idem/bench/internal/footprint"
	"github.com/idem-dev/idem/bench/internal/load"
	"github.com/idem-dev/idem/bench/internal/redisd"
	"github.com/idem-dev/idem/bench/internal/report"
	"github.com/idem-dev/idem/bench/internal/results"
	"github.com/idem-dev/idem/bench/internal/runner"
	"github.com/idem-dev/idem/bench/internal/scale"
)

func main() {
	log.SetFlags(log.Ltime)
	var (
		root        = flag.String("root", "..", "the idem repository: BENCHMARKS.md and docs/bench/ are written there")
		bin         = flag.String("bin", "bin", "directory of the built contenders and idem")
		peers       = flag.String("peers", "peers", "directory of the Node peers (installed)")
		work        = flag.String("work", "", "directory for logs and contender files (default: a new temporary one)")
		rounds      = flag.Int("rounds", 3, "rounds; each runs every contender once, and the report shows medians")
		duration    = flag.Duration("duration", 5*time.Second, "length of each measured run")
		warmup      = flag.Duration("warmup", time.Second, "warm-up before each measured run")
		conns       = flag.Int("c", 64, "concurrent connections (and requests) of the load")
		known       = flag.Int("known-keys", 1000, "keys the replay and mix scenarios retry")
		raceKeys    = flag.Int("race-keys", 20, "keys of the race scenario")
		racePerKey  = flag.Int("race-per-key", 50, "concurrent requests per key in the race scenario")
		raceDelay   = flag.Duration("race-delay", 200*time.Millisecond, "how long the operation takes in the race scenario")
		only        = flag.String("only", "", "comma-separated contender IDs to run (default all)")
		scenarios   = flag.String("scenarios", "", "comma-separated load scenarios: first,replay,mix (default all)")
		scaleMode   = flag.String("scale", "default", "store scale runs: off, quick (10^4 only), default (10^4 and 10^6), full (adds 10^7 on PostgreSQL)")
		scaleStores = flag.String("scale-stores", "", "comma-separated stores of the scale runs: file,postgres,redis (default all)")
		reportOnly  = flag.Bool("report-only", false, "rebuild BENCHMARKS.md and the charts from docs/bench/results.json without measuring")
		pg          = flag.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
		redisURL    = flag.String("redis", "redis://127.0.0.1:6379", "Redis URL, without a database number (the run uses databases 8-13)")
		command     = flag.String("command", "bench/run.sh", "the command line to print in BENCHMARKS.md")
		skipLoadRun = flag.Bool("skip-load", false, "skip the load and race scenarios and the duels (scale runs only)")
		duelSlice   = flag.Duration("duel-slice", time.Second, "how long each side of a duel gets the load at a time")
		duelPairs   = flag.Int("duel-pairs", 20, "A B pairs of slices per duel (0: no duels): with 20 rather than 10, the gateway duels interquartile ranges were 0.03-0.10 wide instead of 0.09-0.16 on one day")
		duelsOnly   = flag.Bool("duels-only", false, "run the duels only: no rounds, no race, no scale runs")
		fsyncPort   = flag.Int("redis-fsync-port", 16390, "port of the harness's own redis-server with appendfsync always (gw-redis-fsync); 0: none")
		callPairs   = flag.Int("call-pairs", 16, "pairs of in-process benchmark runs, idem's middleware against the reference, per scenario (0: none)")
		calls       = flag.Int("calls", 20000, "calls per in-process benchmark run")
		footKeys    = flag.String("footprint", "", "live keys per store of the footprint stage (memory per key, restart), e.g. file=10000000,pebble=1000000,redis=1000000,postgres=1000000 (default: none)")
		appendPairs = flag.Int("append-pairs", 16, "pairs of store-level runs, the file store's log with OneSync (log1) against one synced append of the same bytes (wal1), at 16 and at 64 writers (0: none)")
		appendTime  = flag.String("append-benchtime", "2s", "-test.benchtime of each store-level run")
		churn       = flag.Bool("churn", false, "run the file store's churn measurement (log size over live data, about 90 s)")
		portBase    = flag.Int("port-base", 18080, "first of the six ports the contenders listen on (PORT_BASE to PORT_BASE+5), so that two runs can share the machine")
	)
	flag.Parse()
	chartDir := filepath.Join(*root, "docs", "bench")
	jsonPath := filepath.Join(chartDir, "results.json")
	mdPath := filepath.Join(*root, "BENCHMARKS.md")
	if *reportOnly {
		doc, err := results.Load(jsonPath)
		if err != nil {
			log.Fatal(err)
		}
		if err := report.Write(doc, mdPath, chartDir); err != nil {
			log.Fatal(err)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *work == "" {
		d, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			log.Fatal(err)
		}
		*work = d
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			log.Fatal(err)
		}
		return a
	}
	port := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", *portBase+i) }
	opts := runner.Options{
		Setup: contender.Setup{
			Bin: abs(*bin), Peers: abs(*peers),
			Upstream: port(0), Listen: port(1), Admin: port(2),
			Postgres: withParam(*pg, "idem_schema=idem_bench"),
			Redis:    strings.TrimSuffix(*redisURL, "/"),
		},
		Rounds: *rounds, Warmup: *warmup, Duration: *duration, Connections: *conns,
		KnownKeys: *known, RaceKeys: *raceKeys, RacePerKey: *racePerKey, RaceDelay: *raceDelay,
		Only: split(*only), Work: *work,
		DuelSlice: *duelSlice, DuelPairs: *duelPairs, DuelListen: port(4), DuelAdmin: port(5),
	}
	for _, s := range split(*scenarios) {
		opts.Scenarios = append(opts.Scenarios, load.Scenario(s))
	}
	doc := &results.Doc{
		Command: *command,
		Config: results.Config{
			Rounds: *rounds, Duration: *duration, Warmup: *warmup, Connections: *conns, KnownKeys: *known,
			RaceKeys: *raceKeys, RacePerKey: *racePerKey, RaceDelay: *raceDelay, Scale: *scaleMode,
			DuelSlice: *duelSlice, DuelPairs: *duelPairs,
		},
		Started: time.Now().UTC(),
	}
	if *duelsOnly {
		// The saved config says what ran: no rounds, no scale runs.
		doc.Config.Rounds, doc.Config.Scale = 0, "off"
	}
	doc.Machine = runner.Machine()
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		log.Fatal(err)
	}
	// After each stage, what the run has so far: a run stopped late keeps
	// its stages (bench/run.sh -report-only rebuilds the report from them).
	checkpoint := func(stage string) {
		doc.Finished = time.Now().UTC()
		if err := doc.Save(jsonPath); err != nil {
			log.Printf("saving %s after %s: %v", jsonPath, stage, err)
		}
	}
	log.Printf("work directory (logs): %s", *work)
	if *fsyncPort != 0 && !*skipLoadRun {
		if !redisd.Available() {
			doc.Notes = append(doc.Notes, "redis-server is not installed: Redis with appendfsync always did not run")
		} else {
			dir := filepath.Join(*work, "redis-fsync")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				log.Fatal(err)
			}
			rs, err := redisd.Start(ctx, dir, *fsyncPort)
			if err != nil {
				log.Fatal(err)
			}
			defer rs.Stop()
			opts.Setup.RedisFsync = rs.URL()
		}
	}
	if !*skipLoadRun && !*duelsOnly {
		if err := runner.Run(ctx, opts, doc); err != nil {
			log.Fatal(err)
		}
		checkpoint("rounds")
	}
	// The duels decide the goals; the rounds' ratios are shown beside
	// them.
	if !*skipLoadRun && *duelPairs > 0 {
		if err := runner.Duels(ctx, opts, doc); err != nil {
			log.Fatal(err)
		}
		checkpoint("duels")
	}
	if *callPairs > 0 && !*duelsOnly && !*skipLoadRun && len(opts.Only) == 0 {
		copts := runner.CallOptions{Test: filepath.Join(abs(*bin), "inproc.test"), Pairs: *callPairs, Calls: *calls}
		if err := runner.CallDuels(ctx, copts, doc); err != nil {
			log.Printf("calls: %v", err)
			doc.Notes = append(doc.Notes, fmt.Sprintf("in-process middleware benchmark stopped: %v", err))
		}
		checkpoint("calls")
	}
	if *appendPairs > 0 && !*duelsOnly && !*skipLoadRun && len(opts.Only) == 0 {
		aopts := runner.AppendOptions{Test: filepath.Join(abs(*bin), "fileanchor.test"), Dir: filepath.Join(abs(*root), "store", "file"),
			Pairs: *appendPairs, Benchtime: *appendTime}
		if err := runner.AppendDuels(ctx, aopts, doc); err != nil {
			log.Printf("appends: %v", err)
			doc.Notes = append(doc.Notes, fmt.Sprintf("store-level append benchmark stopped: %v", err))
		}
		checkpoint("appends")
	}
	if *churn && !*duelsOnly {
		if err := footprint.Churn(ctx, *root, doc); err != nil {
			log.Printf("churn: %v", err)
			doc.Notes = append(doc.Notes, fmt.Sprintf("churn measurement failed: %v", err))
		}
		checkpoint("churn")
	}
	if keys := parseKeys(*footKeys); len(keys) > 0 && !*duelsOnly {
		footprint.Run(ctx, footprint.Options{
			StoreScale: filepath.Join(abs(*bin), "storescale"), Dir: filepath.Join(*work, "footprint"), Keys: keys,
			Postgres: withParam(*pg, "idem_schema=idem_footprint"), RedisPort: *fsyncPort + 1,
		}, doc)
		checkpoint("footprint")
	}
	if *scaleMode != "off" && !*duelsOnly {
		sopts := scale.Options{
			Mode: *scaleMode, Dir: filepath.Join(*work, "scale"),
			Postgres: withParam(*pg, "idem_schema=idem_scale"), Redis: *redisURL + "/13",
			Stores: split(*scaleStores),
		}
		if err := scale.Run(ctx, sopts, doc); err != nil {
			log.Printf("scale: %v", err)
			doc.Notes = append(doc.Notes, fmt.Sprintf("scale runs stopped: %v", err))
		}
	}
	doc.Finished = time.Now().UTC()
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := doc.Save(jsonPath); err != nil {
		log.Fatal(err)
	}
	if err := report.Write(doc, mdPath, chartDir); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s and %s (%s)", mdPath, chartDir, doc.Finished.Sub(doc.Started).Round(time.Second))
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseKeys reads "file=10000000,pebble=1000000".
func parseKeys(s string) map[string]int {
	out := map[string]int{}
	for _, f := range split(s) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			log.Fatalf("-footprint: %q is not store=keys", f)
		}
		out[k] = n
	}
	return out
}

func withParam(dsn, p string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + p
	}
	return dsn + "?" + p
}
