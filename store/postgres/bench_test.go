package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
)

// benchValueSize is the size of the value each Complete stores.
const benchValueSize = 1024

// benchPair reserves a new key and completes it: the work of one first call.
func benchPair(ctx context.Context, s *Store, key string, value []byte) error {
	token := mrand.Uint64()
	kh := store.HashKey("bench", key)
	res, err := s.Reserve(ctx, store.ReserveRequest{
		Record: store.Record{
			KeyHash: kh, Scope: "bench", Key: key,
			Fingerprint: "sha256:3f0a7e4c9b1d2e8f6a5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706",
			Binding:     "POST /v1/charges", State: store.InProgress, Token: token,
			RequestID: "req_0123456789abcdef",
		},
		Lease: time.Minute, TTL: 24 * time.Hour, TakeOverStale: true,
	})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return fmt.Errorf("fresh key %s not acquired", key)
	}
	return s.Complete(ctx, store.Completion{
		Fence: store.Fence{KeyHash: kh, Scope: "bench", Token: token},
		State: store.Succeeded, Value: value, TTL: 24 * time.Hour,
	})
}

// benchPool opens a pool of exactly c connections, all connected.
func benchPool(t testing.TB, dsn string, c int) *pgxpool.Pool {
	t.Helper()
	pool := openPool(t, dsn, int32(c))
	var conns []*pgxpool.Conn
	for range c {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	return pool
}

func randomValue(t testing.TB) []byte {
	v := make([]byte, benchValueSize)
	if _, err := rand.Read(v); err != nil {
		t.Fatal(err)
	}
	return v
}

// BenchmarkReserveComplete measures Reserve+Complete pairs on new keys with
// a 1 KiB value, at 1, 16 and 64 concurrent callers (one connection each).
func BenchmarkReserveComplete(b *testing.B) {
	dsn := testenv.Postgres(b)
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("c%d", c), func(b *testing.B) {
			pool := benchPool(b, dsn, c)
			s := newTestStore(b, pool, freshSchema(b, pool))
			value := randomValue(b)
			prefix := uniqueName("k")
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			for range c {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := benchPair(context.Background(), s, prefix+strconv.FormatInt(i, 10), value); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
}

// runStore runs c callers doing pairs for d and returns pairs per second
// and the mean pair latency.
func runStore(t *testing.T, pool *pgxpool.Pool, opts Options, c int, d time.Duration) (float64, time.Duration) {
	s := newTestStore(t, pool, opts)
	value := randomValue(t)
	prefix := uniqueName("k")
	var (
		pairs   atomic.Int64
		latency atomic.Int64
		next    atomic.Int64
		failed  atomic.Value
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				// The pair itself runs to the end: only the loop stops at d.
				err := benchPair(context.Background(), s, prefix+strconv.FormatInt(next.Add(1), 10), value)
				if err != nil {
					failed.Store(err)
					return
				}
				latency.Add(int64(time.Since(t0)))
				pairs.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	n := pairs.Load()
	return float64(n) / elapsed.Seconds(), time.Duration(latency.Load() / max(n, 1))
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// pgbenchScript writes the store's own reserve and complete statements as a
// pgbench script, their parameters turned into pgbench variables. The key
// hash is computed by the server from a random integer, as pgbench has no
// random bytes.
func pgbenchScript(t *testing.T, s *Store) string {
	sub := func(sql string, vars map[string]string) string {
		return placeholder.ReplaceAllStringFunc(sql, func(m string) string {
			v, ok := vars[m[1:]]
			if !ok {
				t.Fatalf("no pgbench variable for %s", m)
			}
			return v
		}) + ";\n"
	}
	kh := "sha256(int8send(:k))"
	script := "\\set k random(1, 9223372036854775806)\n\\set tok random(1, 9223372036854775806)\n" +
		sub(s.sql.reserve, map[string]string{"1": kh, "2": ":scope", "3": ":key", "4": ":fp", "5": ":binding",
			"6": ":tok", "7": ":reqid", "8": ":lease", "9": ":ttl", "10": ":take", "11": "NULL", "12": "NULL"}) +
		sub(s.sql.complete, map[string]string{"1": kh, "2": ":tok", "3": ":state", "4": ":val", "5": ":ttl"})
	path := filepath.Join(t.TempDir(), "pair.sql")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latLine = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

// runPgbench runs the script raw with c clients for d and returns
// transactions (pairs) per second and the mean latency.
func runPgbench(t *testing.T, dsn, script string, c int, d time.Duration) (float64, time.Duration) {
	now := time.Now()
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(c), "-j", strconv.Itoa(min(c, 2)),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script,
		"-D", "scope=bench", "-D", "key=k_" + strconv.FormatInt(now.UnixNano(), 10),
		"-D", "fp=sha256:3f0a7e4c9b1d2e8f6a5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706",
		"-D", "binding=POST /v1/charges", "-D", "reqid=req_0123456789abcdef",
		"-D", "lease=" + strconv.FormatInt(micros(time.Minute), 10), "-D", "ttl=" + strconv.FormatInt(micros(24*time.Hour), 10),
		"-D", "take=true", "-D", "state=succeeded", "-D", `val=\x` + hex.EncodeToString(randomValue(t)),
		dsn, // the statements name their table with its schema
	}
	if os.Getenv("IDEM_BENCH_KEEP") != "" {
		args = append([]string{"-r"}, args...)
	}
	out, err := exec.Command("pgbench", args...).CombinedOutput()
	if os.Getenv("IDEM_BENCH_KEEP") != "" {
		t.Logf("pgbench %s\n%s", strings.Join(args, " "), out)
	}
	if err != nil {
		t.Fatalf("pgbench: %v\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	l := latLine.FindSubmatch(out)
	if m == nil || l == nil {
		t.Fatalf("pgbench output without tps or latency:\n%s", out)
	}
	if !strings.Contains(string(out), "number of failed transactions: 0 ") {
		t.Fatalf("pgbench transactions failed:\n%s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	lat, _ := strconv.ParseFloat(string(l[1]), 64)
	return tps, time.Duration(lat * float64(time.Millisecond))
}

// TestCompareWithPgbench (IDEM_BENCH=1) runs Reserve+Complete pairs through
// the store and the same two statements raw through pgbench -M prepared, at
// the same concurrency, on the same server, alternately, and prints both
// and their ratio. IDEM_BENCH_SECONDS (default 10) is the length of each
// run, IDEM_BENCH_ROUNDS (default 2) the number of runs per cell; the
// table shows the medians. Not parallel: it measures throughput, which
// other tests would share.
func TestCompareWithPgbench(t *testing.T) {
	if os.Getenv("IDEM_BENCH") == "" {
		t.Skip("IDEM_BENCH=1 runs the comparison with pgbench")
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		testenv.Unavailable(t, "pgbench is not installed: %v", err)
	}
	dsn := testenv.Postgres(t)
	secs, rounds := 10, 2
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	d := time.Duration(secs) * time.Second
	admin := testPool(t, 2)
	type cell struct{ store, raw []float64 }
	concurrency := []int{1, 16, 64}
	results := make(map[int]*cell)
	for round := range rounds {
		for _, c := range concurrency {
			if results[c] == nil {
				results[c] = &cell{}
			}
			runs := []string{"store", "pgbench"}
			if round%2 == 1 {
				slices.Reverse(runs) // neither side always runs on a warmer server
			}
			for _, which := range runs {
				// Each run gets an empty table, right after a checkpoint.
				opts := freshSchema(t, admin)
				if _, err := admin.Exec(context.Background(), "CHECKPOINT"); err != nil {
					t.Fatal(err)
				}
				switch which {
				case "store":
					pool := benchPool(t, dsn, c)
					tps, lat := runStore(t, pool, opts, c, d)
					pool.Close()
					results[c].store = append(results[c].store, tps)
					t.Logf("round %d c%-2d store   %8.0f pairs/s  mean %v", round+1, c, tps, lat.Round(time.Microsecond))
				case "pgbench":
					s, _ := New(admin, opts)
					tps, lat := runPgbench(t, dsn, pgbenchScript(t, s), c, d)
					results[c].raw = append(results[c].raw, tps)
					t.Logf("round %d c%-2d pgbench %8.0f pairs/s  mean %v", round+1, c, tps, lat.Round(time.Microsecond))
				}
				dropSchema(t, admin, opts.Schema)
			}
		}
	}
	median := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Reserve+Complete pairs/s, %d B value, %d x %d s runs, medians:\n", benchValueSize, rounds, secs)
	// The server's speed drifts with the machine's other load, so the
	// ratio of the two runs of one round (back to back) says more than the
	// ratio of the medians.
	fmt.Fprintf(&b, "%-12s %12s %12s %8s   %s\n", "concurrency", "store", "pgbench", "ratio", "per-round ratios")
	for _, c := range concurrency {
		st, raw := median(results[c].store), median(results[c].raw)
		var ratios []float64
		var list []string
		for i := range results[c].store {
			ratios = append(ratios, results[c].store[i]/results[c].raw[i])
			list = append(list, fmt.Sprintf("%.2f", ratios[i]))
		}
		fmt.Fprintf(&b, "%-12d %12.0f %12.0f %8.2f   median %.2f of %s\n", c, st, raw, st/raw, median(ratios), strings.Join(list, " "))
	}
	t.Log("\n" + b.String())
}
