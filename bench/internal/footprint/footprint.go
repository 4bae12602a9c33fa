// Package footprint measures what live keys cost each store at scale: the
// memory per key, and how long a restart takes, after a clean stop and
// after a kill -9. It writes durable reserve+complete pairs through the
// store itself (cmd/storescale, each step its own process) and restarts
// what holds the records: the embedded stores (file, Pebble) in a fresh
// process, a redis-server of its own (appendfsync always) killed and
// started again. PostgreSQL is the shared server: its records are on disk,
// so a key's cost is its share of the table and indexes, and a restart is
// a fresh process opening the store.
package footprint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/bench/internal/redisd"
	"github.com/idem-dev/idem/bench/internal/results"
	"github.com/idem-dev/idem/internal/gateway/dsn"
)

// Options configures Run.
type Options struct {
	// StoreScale is the storescale binary.
	StoreScale string
	// Dir holds the embedded stores and the Redis server's files.
	Dir string
	// Keys is the number of live keys per store (file, pebble, redis,
	// postgres); a store not listed is not measured.
	Keys map[string]int
	// Postgres is an idem DSN whose schema the run drops and recreates.
	Postgres string
	// RedisPort is where the run's own redis-server listens.
	RedisPort int
}

// Stores is the order the stores are measured in.
var Stores = []string{"file", "pebble", "redis", "postgres"}

// Run measures each store of opts.Keys and adds what it found to doc.
func Run(ctx context.Context, opts Options, doc *results.Doc) {
	for _, st := range Stores {
		n, ok := opts.Keys[st]
		if !ok || n <= 0 {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		log.Printf("footprint: %s at %d live keys", st, n)
		start := time.Now()
		var f results.Footprint
		var err error
		switch st {
		case "file", "pebble":
			f, err = embedded(ctx, opts, st, n)
		case "redis":
			f, err = redisServer(ctx, opts, n)
		case "postgres":
			f, err = postgres(ctx, opts, n)
		}
		f.Store, f.Keys = st, n
		if err != nil {
			f.Err = err.Error()
			log.Printf("footprint: %s: %v", st, err)
		}
		log.Printf("footprint: %s: %.1f B/key (%s); restart %.2f s, after kill -9 %.2f s, replay %.2f s; %s in all",
			st, f.BytesPerKey, f.MemoryWhat, f.RestartSeconds, f.KillRestartSeconds, f.ReplaySeconds, time.Since(start).Round(time.Second))
		doc.Footprint = append(doc.Footprint, f)
	}
}

// run runs storescale with args and returns its result line.
func run(ctx context.Context, opts Options, args ...string) (result, error) {
	cmd := exec.CommandContext(ctx, opts.StoreScale, args...)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		log.Printf("  storescale: %s", l)
	}
	if err != nil {
		return result{}, fmt.Errorf("storescale %s: %v", strings.Join(args, " "), err)
	}
	return parse(out)
}

// result is storescale's "result:" line (cmd/storescale.Result).
type result struct {
	Op         string  `json:"op"`
	Keys       int     `json:"keys"`
	Seconds    float64 `json:"seconds"`
	RSSPerKey  float64 `json:"rss_bytes_per_key"`
	HeapPerKey float64 `json:"heap_bytes_per_key"`
}

func parse(out []byte) (result, error) {
	var r result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "result: "); ok {
			return r, json.Unmarshal([]byte(j), &r)
		}
	}
	return r, fmt.Errorf("no result line in %q", out)
}

// embedded measures the file or Pebble store: fill, restart after Close,
// a tenth more keys then kill -9 while open and restart, and (file) a
// restart with no snapshot.
func embedded(ctx context.Context, opts Options, kind string, n int) (results.Footprint, error) {
	f := results.Footprint{MemoryWhat: "RSS growth of the process, after a GC", RestartWhat: "open in a fresh process"}
	dir := filepath.Join(opts.Dir, kind)
	if err := os.RemoveAll(dir); err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	storeDSN := kind + ":" + dir
	keys := fmt.Sprint(n)
	r, err := run(ctx, opts, "-store", storeDSN, "-keys", keys, "fill")
	if err != nil {
		return f, err
	}
	f.FillSeconds, f.BytesPerKey = r.Seconds, r.RSSPerKey
	f.DiskBytes = du(dir)
	if r, err = run(ctx, opts, "-store", storeDSN, "-keys", keys, "open"); err != nil {
		return f, err
	}
	f.RestartSeconds, f.RestartBytesPerKey = r.Seconds, r.RSSPerKey
	// kill -9 while the store is open, after a tenth more keys.
	f.KillKeys = max(n/10, 1)
	if err := killed(ctx, opts, storeDSN, n, f.KillKeys); err != nil {
		return f, err
	}
	if r, err = run(ctx, opts, "-store", storeDSN, "-keys", keys, "open"); err != nil {
		return f, err
	}
	f.KillRestartSeconds = r.Seconds
	if kind == "file" {
		// The whole log replayed: the snapshot out of the way.
		if err := os.Rename(filepath.Join(dir, "index.snap"), filepath.Join(opts.Dir, "index.snap.saved")); err == nil {
			if r, err = run(ctx, opts, "-store", storeDSN, "-keys", keys, "open"); err != nil {
				return f, err
			}
			f.ReplaySeconds = r.Seconds
		}
	}
	return f, nil
}

// killed writes more keys from n on in a storescale process that then
// holds the store open, and kills it with SIGKILL.
func killed(ctx context.Context, opts Options, storeDSN string, n, more int) error {
	cmd := exec.CommandContext(ctx, opts.StoreScale, "-store", storeDSN, "-from", fmt.Sprint(n), "-keys", fmt.Sprint(more), "-hold", "crash")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	held := false
	for sc.Scan() {
		log.Printf("  storescale: %s", sc.Text())
		if sc.Text() == "held" {
			held = true
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !held {
		return fmt.Errorf("storescale crash ended before holding the store")
	}
	return nil
}

// redisServer measures a redis-server of the run's own, appendfsync
// always: its used memory per key, and its restart after SIGKILL (the
// AOF replayed).
func redisServer(ctx context.Context, opts Options, n int) (results.Footprint, error) {
	f := results.Footprint{MemoryWhat: "Redis INFO used_memory growth", RestartWhat: "redis-server killed with SIGKILL and started again: its AOF replayed until PING answers"}
	if !redisd.Available() {
		return f, fmt.Errorf("redis-server is not installed")
	}
	dir := filepath.Join(opts.Dir, "redis")
	if err := os.RemoveAll(dir); err != nil {
		return f, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	s, err := redisd.Start(ctx, dir, opts.RedisPort)
	if err != nil {
		return f, err
	}
	defer s.Stop()
	m0, err := s.UsedMemory(ctx)
	if err != nil {
		return f, err
	}
	storeDSN := s.URL() + "/0"
	r, err := run(ctx, opts, "-store", storeDSN, "-keys", fmt.Sprint(n), "fill")
	if err != nil {
		return f, err
	}
	m1, err := s.UsedMemory(ctx)
	if err != nil {
		return f, err
	}
	f.FillSeconds, f.BytesPerKey, f.DiskBytes = r.Seconds, float64(m1-m0)/float64(n), du(dir)
	took, err := s.Restart(ctx)
	if err != nil {
		return f, err
	}
	f.KillRestartSeconds = took.Seconds()
	// The records are all there.
	if _, err = run(ctx, opts, "-store", storeDSN, "-keys", fmt.Sprint(n), "-sample", "1000", "open"); err != nil {
		return f, err
	}
	return f, nil
}

// postgres measures the shared PostgreSQL: table and indexes per key, and
// a fresh process's open of the store.
func postgres(ctx context.Context, opts Options, n int) (results.Footprint, error) {
	f := results.Footprint{MemoryWhat: "table and indexes on disk (pg_total_relation_size): PostgreSQL keeps records on disk, its memory is its buffer cache",
		RestartWhat: "a fresh process opens the store (connect, check the schema, read keys); the shared server is not restarted"}
	f.MemoryWhat += fmt.Sprintf("; the first %d keys written through the store, the others copied from them by INSERT ... SELECT", min(n, pgSeed))
	d, err := dsn.Parse(opts.Postgres)
	if err != nil {
		return f, err
	}
	schema := d.Params["schema"]
	if schema == "" || schema == "public" {
		return f, fmt.Errorf("the footprint run drops its schema: give it one of its own (idem_schema=...), not %q", schema)
	}
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return f, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	drop := func() error {
		_, err := conn.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	}
	if err := drop(); err != nil {
		return f, err
	}
	defer drop()
	// The first keys through the store, the rest copied from them by
	// the server: a pair through the store is two synced commits, and 10^6
	// of them take most of an hour on a loaded machine.
	seed := min(n, pgSeed)
	start := time.Now()
	if _, err := run(ctx, opts, "-store", opts.Postgres, "-keys", fmt.Sprint(seed), "fill"); err != nil {
		return f, err
	}
	table := pgx.Identifier{schema, "idem_records"}.Sanitize()
	if err := copyRows(ctx, conn, table, seed, n); err != nil {
		return f, err
	}
	f.FillSeconds = time.Since(start).Seconds()
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return f, err
	}
	var size int64
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", table).Scan(&size); err != nil {
		return f, err
	}
	f.BytesPerKey, f.DiskBytes = float64(size)/float64(n), size
	r, err := run(ctx, opts, "-store", opts.Postgres, "-keys", fmt.Sprint(n), "-sample", "1000", "open")
	if err != nil {
		return f, err
	}
	f.RestartSeconds = r.Seconds
	return f, nil
}

// pgSeed is how many keys the PostgreSQL footprint writes through the
// store; copyRows writes the others.
const pgSeed = 20_000

// copyRows adds the records of keys from..to-1 as the store would have
// written them (storescale's records), copying key scale-0's row with the
// key, its hash, the request ID and the token changed, a million rows a
// statement.
func copyRows(ctx context.Context, conn *pgx.Conn, table string, from, to int) error {
	if from >= to {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT a.attname FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, table)
	if err != nil {
		return err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	exprs := make([]string, len(cols))
	for i, c := range cols {
		switch c {
		case "key_hash":
			exprs[i] = `sha256(convert_to(t.scope || ':scale-' || i, 'UTF8'))`
		case "key":
			exprs[i] = `'scale-' || i`
		case "request_id":
			exprs[i] = `'req-scale-' || i`
		case "token":
			exprs[i] = `i + 1`
		default:
			exprs[i] = "t." + pgx.Identifier{c}.Sanitize()
		}
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	const chunk = 1_000_000
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		_, err := conn.Exec(ctx, `INSERT INTO `+table+` (`+strings.Join(cols, ", ")+`)
SELECT `+strings.Join(exprs, ", ")+` FROM `+table+` t, generate_series($1::bigint, $2::bigint - 1) AS i WHERE t.key = 'scale-0'`, lo, hi)
		if err != nil {
			return fmt.Errorf("copying rows %d-%d: %w", lo, hi, err)
		}
	}
	return nil
}

// du is the bytes the files under dir take on disk.
func du(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}
