package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	// The peer is a second client, as another process would be.
	storetest.Run(t, harness(testPool(t, 16), testPool(t, 16)))
}

// harness makes the suite's stores on pool, each over a schema of its
// own, and their peers on peerPool.
func harness(pool, peerPool *pgxpool.Pool) storetest.Harness {
	return storetest.Harness{
		New: func(t *testing.T) store.Store {
			return newTestStore(t, pool, freshSchema(t, pool))
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			return newTestStore(t, peerPool, s.(*Store).Options())
		},
		IndexKeys: func(t *testing.T, s store.Store) []string { return indexKeys(t, s.(*Store)) },
	}
}

// TestConformanceCacheDescribe runs the suite without named prepared
// statements, the mode for poolers in transaction mode (see the package
// documentation).
func TestConformanceCacheDescribe(t *testing.T) {
	t.Parallel()
	describe := func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe }
	dsn := testenv.Postgres(t)
	h := harness(openPool(t, dsn, 8, describe), openPool(t, dsn, 8, describe))
	h.Racers = 32
	storetest.Run(t, h)
}

// TestConformanceReadFirst runs the suite with every reservation reading
// its key first (Options.ReadFirstAfter below 0): the read must answer
// exactly as the reservation statement would, and leave to it every key it
// cannot answer.
func TestConformanceReadFirst(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 16)
	peerPool := testPool(t, 16)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			opts := freshSchema(t, pool)
			opts.ReadFirstAfter = -1
			return newTestStore(t, pool, opts)
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			return newTestStore(t, peerPool, s.(*Store).Options())
		},
		IndexKeys: func(t *testing.T, s store.Store) []string { return indexKeys(t, s.(*Store)) },
	})
}

// TestReadFirstFollowsTraffic: by default the store starts with the
// reservation statement, reads first once retries are most of its traffic,
// still reserves new keys then, and goes back when first calls return.
func TestReadFirstFollowsTraffic(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	s := newTestStore(t, pool, freshSchema(t, pool))
	ctx := context.Background()
	reserve := func(key string, token uint64) store.Reservation {
		t.Helper()
		res, err := s.Reserve(ctx, request(key, token))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const keys = 40
	for i := range keys {
		k := fmt.Sprintf("k%d", i)
		if !reserve(k, uint64(i+1)).Acquired {
			t.Fatalf("%s: not acquired", k)
		}
		if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: store.HashKey("test", k), Token: uint64(i + 1)},
			State: store.Succeeded, Value: []byte(k), TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if s.readFirst() || s.reads.Load() != 0 {
		t.Fatalf("reads first after first calls only (%d reads)", s.reads.Load())
	}
	for i := range keys {
		res := reserve(fmt.Sprintf("k%d", i), 1000)
		if res.Acquired || string(res.Existing.Value) != fmt.Sprintf("k%d", i) {
			t.Fatalf("retry of k%d: %+v", i, res)
		}
	}
	if !s.readFirst() || s.reads.Load() == 0 {
		t.Fatalf("does not read first after %d retries in a row (%d reads)", keys, s.reads.Load())
	}
	if !reserve("new-0", 2000).Acquired {
		t.Fatal("a new key was not reserved while reading first")
	}
	for i := 1; i < keys; i++ {
		reserve(fmt.Sprintf("new-%d", i), uint64(2000+i))
	}
	if s.readFirst() {
		t.Fatalf("still reads first after %d first calls in a row", keys)
	}
}

// request is a reservation of key with a lease of a minute and a lifetime
// of an hour: neither passes during a test unless the test shortens it.
func request(key string, token uint64) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("test", key), Scope: "test", Key: key,
			Fingerprint: "fp", Binding: "POST /x", State: store.InProgress, Token: token,
			RequestID: "req",
		},
		Lease:         time.Minute,
		TTL:           time.Hour,
		TakeOverStale: true,
	}
}

// eventually calls cond every step until it reports true, and fails the
// test after within: a loaded machine makes a test slower, not wrong.
func eventually(t testing.TB, within, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(step) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
	}
}

// waitExpired waits until n records of s have expired on the server's
// clock.
func waitExpired(t testing.TB, s *Store, n int) {
	t.Helper()
	eventually(t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("%d records expired", n), func() bool {
		got, err := s.CountExpired(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return got >= n
	})
}

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 8)
	opts := Options{Schema: uniqueName("idem_migrate"), Table: "records"}
	t.Cleanup(func() { dropSchema(t, pool, opts.Schema) })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- Migrate(ctx, pool, opts) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	// A second table in the same schema has its own versions.
	if err := Migrate(ctx, pool, Options{Schema: opts.Schema, Table: "other"}); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT table_name, version FROM `+pgx.Identifier{opts.Schema, MigrationsTable}.Sanitize()+` ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	type applied struct {
		Table   string
		Version int32
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[applied])
	if err != nil {
		t.Fatal(err)
	}
	v := int32(SchemaVersion())
	if v < 1 || len(got) != 2*int(v) || got[0] != (applied{"other", 1}) || got[len(got)-1] != (applied{"records", v}) {
		t.Fatalf("applied migrations: %v (schema version %d)", got, v)
	}
	s := newTestStore(t, pool, opts)
	if _, err := s.Reserve(ctx, request("k", 1)); err != nil {
		t.Fatal(err)
	}
}

func TestUnmigratedTable(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 2)
	s := newTestStore(t, pool, Options{Schema: uniqueName("idem_absent")})
	_, err := s.Reserve(context.Background(), request("k", 1))
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Reserve on a missing table: %v, want a hint to migrate", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 1)
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := New(pool, Options{Table: strings.Repeat("t", 49)}); err == nil {
		t.Error("a 49-byte table name was accepted")
	}
	s, err := New(pool, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Options(); got != (Options{Schema: "public", Table: "idem_records", CleanupBatch: 1000, NotifyRecordMax: 7999, ReadFirstAfter: 0.7}) {
		t.Errorf("defaults: %+v", got)
	}
}

// TestTokenBits checks that tokens with the top bit set survive the int64
// column, and that fencing compares all 64 bits.
func TestTokenBits(t *testing.T) {
	t.Parallel()
	s := freshStore(t)
	ctx := context.Background()
	for _, tok := range []uint64{1<<63 | 12345, ^uint64(0), 1 << 63} {
		req := request("tok-"+time.Now().String(), tok)
		if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
			t.Fatalf("Reserve: %+v, %v", res, err)
		}
		got, err := s.Get(ctx, "test", req.Record.KeyHash)
		if err != nil || got.Token != tok {
			t.Fatalf("token %d came back as %d (%v)", tok, got.Token, err)
		}
		wrong := store.Fence{KeyHash: req.Record.KeyHash, Token: tok ^ 1<<63}
		if err := s.Renew(ctx, wrong, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Renew with the top bit flipped: %v", err)
		}
		if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Token: tok},
			State: store.Succeeded, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInvalidKeyHash(t *testing.T) {
	t.Parallel()
	s := freshStore(t)
	ctx := context.Background()
	req := request("k", 1)
	req.Record.KeyHash = "not-a-hash"
	if _, err := s.Reserve(ctx, req); !errors.Is(err, ErrInvalidKeyHash) {
		t.Errorf("Reserve: %v", err)
	}
	if _, err := s.Get(ctx, "test", strings.Repeat("ab", 31)); !errors.Is(err, ErrInvalidKeyHash) {
		t.Errorf("Get with a 31-byte hash: %v", err)
	}
	if err := s.Release(ctx, store.Fence{KeyHash: "zz"}); !errors.Is(err, ErrInvalidKeyHash) {
		t.Errorf("Release: %v", err)
	}
}

// TestTookOver checks that replacing an expired record is not reported as a
// takeover, and replacing a stale lease is.
func TestTookOver(t *testing.T) {
	t.Parallel()
	s := freshStore(t)
	ctx := context.Background()
	mustReserve := func(req store.ReserveRequest, tookOver bool) {
		t.Helper()
		res, err := s.Reserve(ctx, req)
		if err != nil || !res.Acquired || res.TookOver != tookOver {
			t.Fatalf("Reserve: %+v, %v; want acquired, TookOver %v", res, err, tookOver)
		}
	}
	first := request("a", 1)
	first.Lease = 100 * time.Millisecond
	mustReserve(first, false)
	eventually(t, 30*time.Second, 20*time.Millisecond, "lease over", func() bool {
		r, err := s.Get(ctx, "test", first.Record.KeyHash)
		if err != nil {
			t.Fatal(err)
		}
		return r.Stale()
	})
	taker := request("a", 2)
	taker.TTL = 100 * time.Millisecond
	mustReserve(taker, true) // stale lease
	waitExpired(t, s, 1)
	mustReserve(request("a", 3), false) // expired
}

func TestCloseLeavesPoolOpen(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 2)
	s := newTestStore(t, pool, freshSchema(t, pool))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Reserve(ctx, request("k", 1)); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Reserve after Close: %v", err)
	}
	if _, err := s.Cleanup(ctx, 0); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Cleanup after Close: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the pool was closed with the store: %v", err)
	}
}

// TestCleanupBatches checks that Cleanup deletes in batches of CleanupBatch
// and honours limit across them.
func TestCleanupBatches(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 2)
	opts := freshSchema(t, pool)
	opts.CleanupBatch = 7
	s := newTestStore(t, pool, opts)
	ctx := context.Background()
	for i := range 30 {
		req := request("c"+string(rune('a'+i)), uint64(i+1))
		req.TTL = 50 * time.Millisecond // expiring one after the other
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	waitExpired(t, s, 30)
	var batches []int
	s.afterBatch = func(n int, _ time.Duration) { batches = append(batches, n) }
	n, err := s.Cleanup(ctx, 16)
	if err != nil || n != 16 {
		t.Fatalf("Cleanup limit 16: %d, %v", n, err)
	}
	if want := []int{7, 7, 2}; !equalInts(batches, want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
	// The oldest went first: the 14 that expired last are left.
	rows, err := pool.Query(ctx, `SELECT key FROM `+s.opts.qualified()+` ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 14 || left[0] != "c"+string(rune('a'+16)) || left[13] != "c"+string(rune('a'+29)) {
		t.Fatalf("left after the first 16: %v", left)
	}
	batches = nil
	n, err = s.Cleanup(ctx, 0)
	if err != nil || n != 14 {
		t.Fatalf("Cleanup rest: %d, %v", n, err)
	}
	if want := []int{7, 7, 0}; !equalInts(batches, want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCleanupSkipsLockedRows checks that a batch does not wait for a row
// another transaction holds.
func TestCleanupSkipsLockedRows(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	s := newTestStore(t, pool, freshSchema(t, pool))
	ctx := context.Background()
	for i, key := range []string{"x", "y"} {
		req := request(key, uint64(i+1))
		req.TTL = 50 * time.Millisecond
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	waitExpired(t, s, 2)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	kh, _ := keyHash(store.HashKey("test", "x"))
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.opts.qualified()+` WHERE key_hash = $1 FOR UPDATE`, kh); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := s.Cleanup(cctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup beside a locked row: %d, %v; want 1", n, err)
	}
}

// TestReserveRetriesAfterConcurrentWrite drives the cases the reserve
// statement cannot answer in one go: the row that stops its INSERT was
// committed after the statement's snapshot, so the snapshot shows no row,
// or an expired one. A transaction holds the new row uncommitted while
// Reserve waits on it, then commits; Reserve must report the new row.
func TestReserveRetriesAfterConcurrentWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		expired bool // an expired row exists before
	}{{"absent", false}, {"expired", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool(t, 4)
			s := newTestStore(t, pool, freshSchema(t, pool))
			ctx := context.Background()
			if tc.expired {
				expiring := request("late", 1)
				expiring.TTL = 50 * time.Millisecond
				if _, err := s.Reserve(ctx, expiring); err != nil {
					t.Fatal(err)
				}
				waitExpired(t, s, 1)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			first := request("late", 2)
			kh, _ := keyHash(first.Record.KeyHash)
			if _, err := tx.Exec(ctx, s.sql.reserve, reserveArgs(kh, first, nil)...); err != nil {
				t.Fatal(err)
			}
			type result struct {
				res store.Reservation
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := s.Reserve(ctx, request("late", 3))
				done <- result{res, err}
			}()
			time.Sleep(200 * time.Millisecond) // let Reserve take its snapshot and block
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || got.res.Acquired || got.res.Existing.Token != 2 {
				t.Fatalf("Reserve behind a concurrent write: %+v, %v; want the committed record (token 2)", got.res, got.err)
			}
			if n := s.retries.Load(); n != 1 {
				t.Fatalf("%d re-runs of the reserve statement, want 1", n)
			}
		})
	}
}
