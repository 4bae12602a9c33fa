package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCleanupMillion (IDEM_LONG=1) loads 1,000,000 expired records among
// 1,000,000 live ones, then times Cleanup while callers keep reserving,
// completing and reading live keys, and reports the longest batch (the
// longest any row lock was held) and the callers' worst latency.
// IDEM_CLEANUP_BATCH sets the batch size (default 1000).
func TestCleanupMillion(t *testing.T) {
	t.Parallel()
	if os.Getenv("IDEM_LONG") == "" {
		t.Skip("IDEM_LONG=1 runs the 1M-record cleanup")
	}
	const perKind = 1_000_000
	pool := testPool(t, 8)
	opts := freshSchema(t, pool)
	if v, err := strconv.Atoi(os.Getenv("IDEM_CLEANUP_BATCH")); err == nil {
		opts.CleanupBatch = v
	}
	s := newTestStore(t, pool, opts)
	ctx := context.Background()
	now := time.Now().UTC()

	// Even i expired up to a day ago, odd i live for one to two more days,
	// interleaved in the heap and the index as traffic leaves them. Keys
	// hash like real ones, so the primary index is in random order.
	load := time.Now()
	const chunk = 200_000
	for from := 1; from <= 2*perKind; from += chunk {
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.opts.qualified()+`
			SELECT sha256(int8send(i)), 'bulk', 'key-' || i, 'sha256:fp', 'POST /x',
				CASE WHEN i % 10 = 0 THEN 'in_progress' ELSE 'succeeded' END, i,
				decode(repeat(md5(i::text), 4), 'hex'), 'req-' || i,
				$1::timestamptz - interval '2 days', $1::timestamptz - interval '2 days',
				CASE WHEN i % 2 = 0 THEN $1::timestamptz - (i % 86400) * interval '1 second'
					ELSE $1::timestamptz + interval '1 day' + (i % 86400) * interval '1 second' END,
				$1::timestamptz - interval '2 days'
			FROM generate_series($2::bigint, $3::bigint) AS i`, now, from, from+chunk-1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s.opts.qualified()); err != nil {
		t.Fatal(err)
	}
	var size string
	if err := pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size($1::regclass))`, s.opts.qualified()).Scan(&size); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d rows (%s with indexes) in %v", 2*perKind, size, time.Since(load).Round(time.Millisecond))

	// Callers: pairs on new keys and reads of live bulk keys.
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		phase    = "before"
		lats     = map[string][]time.Duration{}
		failures atomic.Int64
		next     atomic.Int64
	)
	value := randomValue(t)
	record := func(d time.Duration) {
		mu.Lock()
		lats[phase] = append(lats[phase], d)
		mu.Unlock()
	}
	for w := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				var err error
				if w%2 == 0 {
					err = benchPair(ctx, s, "live-"+strconv.FormatInt(next.Add(1), 10), value)
				} else {
					// A live bulk key: sha256(int8send(i)) for an odd i.
					var i [8]byte
					binary.BigEndian.PutUint64(i[:], uint64(2*(next.Add(1)%perKind)+1))
					kh := sha256.Sum256(i[:])
					_, err = s.Get(ctx, "bulk", hex.EncodeToString(kh[:]))
				}
				record(time.Since(start))
				if err != nil {
					failures.Add(1)
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(3 * time.Second)

	// Sample what the other sessions wait for while Cleanup runs: a
	// session stuck behind Cleanup's row locks shows as wait_event_type
	// Lock; I/O waits (WAL flushes, checkpoints) show as IO or LWLock.
	waits := map[string]int{}
	var samples int
	watchStop, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-watchStop:
				return
			case <-tick.C:
			}
			rows, err := pool.Query(ctx, `SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
					AND wait_event_type IS NOT NULL AND wait_event_type <> 'Client'`)
			if err != nil {
				t.Error(err)
				return
			}
			events, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Error(err)
				return
			}
			samples++
			for _, e := range events {
				waits[e]++
			}
		}
	}()

	var batches []time.Duration
	s.afterBatch = func(_ int, d time.Duration) { batches = append(batches, d) }
	mu.Lock()
	phase = "during"
	mu.Unlock()
	begin := time.Now()
	n, err := s.Cleanup(ctx, 0)
	took := time.Since(begin)
	mu.Lock()
	phase = "after"
	mu.Unlock()
	close(watchStop)
	<-watchDone
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n != perKind {
		t.Fatalf("Cleanup removed %d, want %d", n, perKind)
	}
	var expired, live int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE expires_at <= $1), count(*) FILTER (WHERE expires_at > $1) FROM `+s.opts.qualified(), now).Scan(&expired, &live); err != nil {
		t.Fatal(err)
	}
	if expired != 0 || live < perKind {
		t.Fatalf("after Cleanup: %d expired, %d live rows", expired, live)
	}
	if failures.Load() > 0 {
		t.Fatalf("%d caller operations failed", failures.Load())
	}

	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))]
	}
	t.Logf("Cleanup removed %d expired rows (batch %d) in %v: %.0f rows/s, %d batches; batch p50 %v, p99 %v, longest %v",
		n, s.opts.CleanupBatch, took.Round(time.Millisecond), float64(n)/took.Seconds(), len(batches),
		pct(batches, .5).Round(time.Microsecond), pct(batches, .99).Round(time.Microsecond), pct(batches, 1).Round(time.Microsecond))
	// Waiting for a row Cleanup holds shows as Lock:transactionid or
	// Lock:tuple. (Lock:extend is inserters growing the table.)
	rowWaits := waits["Lock:transactionid"] + waits["Lock:tuple"]
	t.Logf("other sessions' waits during cleanup, %d samples 20 ms apart: %v; row lock waits: %d", samples, waits, rowWaits)
	if rowWaits > 0 {
		t.Errorf("sessions waited for row locks during Cleanup")
	}
	for _, ph := range []string{"before", "during", "after"} {
		l := lats[ph]
		t.Logf("callers %-6s cleanup: %6d ops, p50 %v, p99 %v, worst %v", ph, len(l),
			pct(l, .5).Round(time.Microsecond), pct(l, .99).Round(time.Microsecond), pct(l, 1).Round(time.Microsecond))
	}
}
