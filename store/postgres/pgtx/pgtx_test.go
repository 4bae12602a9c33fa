package pgtx_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
	"github.com/idem-dev/idem/trigger"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var bg = context.Background()

type bundle struct {
	pool  *pgxpool.Pool
	opts  postgres.Options
	store *pgtx.Store
	clock *testkit.Clock
	eng   *idem.Engine
	// rows is the business table the operations write: one row per run.
	rows string
}

// setup migrates a schema of its own with a business table "effects". The
// pool has 16 connections, or maxConns.
func setup(t testing.TB, p idem.Policy, maxConns ...int32) *bundle {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	if len(maxConns) > 0 {
		cfg.MaxConns = maxConns[0]
	}
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	opts := postgres.Options{Schema: fmt.Sprintf("idem_pgtx_%d_%s", os.Getpid(), hex.EncodeToString(b))}
	t.Cleanup(func() {
		_, _ = pool.Exec(bg, "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE")
	})
	if err := postgres.Migrate(bg, pool, opts); err != nil {
		t.Fatal(err)
	}
	if err := pgtx.Migrate(bg, pool, opts); err != nil {
		t.Fatal(err)
	}
	rows := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	if _, err := pool.Exec(bg, `CREATE TABLE `+rows+` (record_id uuid NOT NULL, what text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ps, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := pgtx.New(ps)
	clk := testkit.NewClockAt(time.Now())
	if p.CleanupInterval == 0 {
		p.CleanupInterval = -1
	}
	eng := idem.New(s, p, idem.WithClock(clk.Now), idem.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() {
		eng.Close()
		if n := pgtx.Pending(s); n != 0 {
			t.Errorf("%d transactions left open", n)
		}
		_ = s.Close() // its listener for waiters
	})
	return &bundle{pool: pool, opts: opts, store: s, clock: clk, eng: eng, rows: rows}
}

// takeOver calls op for key until it runs: while the key's holder (whose
// renewals tests stall) still has it, the call finds it in progress.
func (b *bundle) takeOver(t *testing.T, key string, op pgtx.Func) idem.Result {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := b.store.Do(bg, b.eng, call(key), op)
		if err == nil {
			return res
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("takeover: %+v, %v", res, err)
		}
	}
}

// effects returns what the business table holds for the record of key.
func (b *bundle) effects(t *testing.T, key string) []string {
	t.Helper()
	rows, err := b.pool.Query(bg, `SELECT what FROM `+b.rows+` WHERE record_id = $1 ORDER BY what`, idem.RecordID("s", key))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// write is an operation that inserts one effect row named what.
func (b *bundle) write(what string) pgtx.Func {
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		h, _ := idem.HoldFrom(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO `+b.rows+` (record_id, what) VALUES ($1, $2)`, h.ID, what)
		return []byte(what), err
	}
}

func call(key string) idem.Call {
	return idem.Call{Scope: "s", Key: key, Fingerprint: "fp", Binding: "POST /transfers"}
}

func (b *bundle) record(t *testing.T, key string) (store.Record, error) {
	t.Helper()
	return b.store.Get(bg, "s", store.HashKey("s", key))
}

// TestWorkCommitsWithOutcome: the operation's row and the record's
// completion are there together; a retry replays without running.
func TestWorkCommitsWithOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	res, err := b.store.Do(bg, b.eng, call("k"), b.write("first"))
	if err != nil || res.Replayed || string(res.Value) != "first" {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	res, err = b.store.Do(bg, b.eng, call("k"), b.write("second"))
	if err != nil || !res.Replayed || string(res.Value) != "first" {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := b.effects(t, "k"); len(got) != 1 || got[0] != "first" {
		t.Fatalf("effects %v, want [first]", got)
	}
	if r, err := b.record(t, "k"); err != nil || r.State != store.Succeeded {
		t.Fatalf("record %+v, %v", r, err)
	}
}

// TestFailureRollsBack: an operation that fails after writing leaves no
// row, under a policy that releases the key and under one that keeps the
// failure; a panic leaves none either.
func TestFailureRollsBack(t *testing.T) {
	t.Parallel()
	for _, onFailure := range []idem.OnFailure{idem.OnFailureRelease, idem.OnFailureCache} {
		t.Run(fmt.Sprint(onFailure), func(t *testing.T) {
			b := setup(t, idem.Policy{OnFailure: onFailure})
			boom := errors.New("declined")
			_, err := b.store.Do(bg, b.eng, call("k"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				if _, err := b.write("doomed")(ctx, tx); err != nil {
					return nil, err
				}
				return nil, boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("err %v", err)
			}
			if got := b.effects(t, "k"); len(got) != 0 {
				t.Fatalf("a failed operation left %v", got)
			}
			r, err := b.record(t, "k")
			if onFailure == idem.OnFailureRelease && !errors.Is(err, store.ErrNotFound) ||
				onFailure == idem.OnFailureCache && (err != nil || r.State != store.Failed) {
				t.Fatalf("record %+v, %v", r, err)
			}
		})
	}
	b := setup(t, idem.Policy{})
	func() {
		defer func() { _ = recover() }()
		_, _ = b.store.Do(bg, b.eng, call("p"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, _ = b.write("doomed")(ctx, tx)
			panic("bug")
		})
	}()
	if got := b.effects(t, "p"); len(got) != 0 {
		t.Fatalf("a panicking operation left %v", got)
	}
	if _, err := b.store.Do(bg, b.eng, call("p"), b.write("again")); err != nil {
		t.Fatal(err)
	}
}

// TestStaleHolderCannotCommit: a holder whose lease was taken over while it
// worked cannot commit its writes; the new holder's are the only ones.
func TestStaleHolderCannotCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: 500 * time.Millisecond})
	wrote := make(chan struct{})
	resume := make(chan struct{})
	stale := make(chan error, 1)
	go func() {
		_, err := b.store.Do(bg, b.eng, call("k"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			v, err := b.write("stale")(ctx, tx)
			close(wrote)
			<-resume // stalls (a GC pause, a slow upstream) past its lease
			return v, err
		})
		stale <- err
	}()
	<-wrote
	pgtx.Stall(b.store, true) // the holder's renewals stop: its lease runs out
	res := b.takeOver(t, "k", b.write("fresh"))
	pgtx.Stall(b.store, false)
	if !res.TookOver {
		t.Fatalf("takeover: %+v", res)
	}
	close(resume)
	if err := <-stale; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale holder got %v, want ErrLeaseLost", err)
	}
	if got := b.effects(t, "k"); len(got) != 1 || got[0] != "fresh" {
		t.Fatalf("effects %v, want only the new holder's", got)
	}
	if r, err := b.record(t, "k"); err != nil || r.State != store.Succeeded || string(r.Value) != "fresh" {
		t.Fatalf("record %+v, %v", r, err)
	}
}

// TestTakeoverWaitsForCommit: a caller that takes the key over between the
// holder's completion UPDATE and its COMMIT waits on the row lock, then
// finds the record completed, and runs nothing.
func TestTakeoverWaitsForCommit(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	b := setup(t, idem.Policy{Lease: lease})
	updated := make(chan struct{})
	commit := make(chan struct{})
	pgtx.SetBeforeCommit(b.store, func() { close(updated); <-commit })
	first := make(chan error, 1)
	go func() {
		_, err := b.store.Do(bg, b.eng, call("k"), b.write("first"))
		first <- err
	}()
	select {
	case <-updated:
	case err := <-first:
		t.Fatalf("the holder finished (%v) without completing in its transaction", err)
	}
	pgtx.SetBeforeCommit(b.store, nil)
	time.Sleep(2 * lease) // the record, as committed, is stale

	var ran atomic.Bool
	second := make(chan error, 1)
	var res idem.Result
	go func() {
		var err error
		res, err = b.store.Do(bg, b.eng, call("k"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			ran.Store(true)
			return b.write("second")(ctx, tx)
		})
		second <- err
	}()
	// The taker's reservation must be waiting for the holder's row lock.
	waitForLockWait(t, b.pool)
	close(commit)
	if err := <-first; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-second; err != nil || !res.Replayed || string(res.Value) != "first" || ran.Load() {
		t.Fatalf("taker: %+v, %v, ran %v; want the holder's outcome replayed", res, err, ran.Load())
	}
	if got := b.effects(t, "k"); len(got) != 1 || got[0] != "first" {
		t.Fatalf("effects %v", got)
	}
}

// waitForLockWait waits until some session of the test database waits for
// a row lock, and fails the test after 10 s.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO%idem_pgtx_%'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no reservation waits for the holder's row lock")
}

// TestConcurrentCallsOneEffect: 64 goroutines with one key write one row.
func TestConcurrentCallsOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Wait: 10 * time.Second})
	var wg sync.WaitGroup
	var runs atomic.Int32
	for i := range 64 {
		wg.Go(func() {
			_, err := b.store.Do(bg, b.eng, call("k"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				runs.Add(1)
				return b.write(fmt.Sprint(i))(ctx, tx)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := b.effects(t, "k"); len(got) != 1 || runs.Load() != 1 {
		t.Fatalf("effects %v after %d runs", got, runs.Load())
	}
}

func TestTxOutsideDo(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	if _, err := b.store.Tx(bg); !errors.Is(err, pgtx.ErrNoHold) {
		t.Fatalf("Tx outside Do: %v", err)
	}
	plain := idem.New(b.store.Store, idem.Policy{})
	defer plain.Close()
	if _, err := b.store.Do(bg, plain, call("k"), b.write("x")); !errors.Is(err, pgtx.ErrNotPgtx) {
		t.Fatalf("Do over a plain store: %v", err)
	}
}

// TestRunLogOnce: duplicate deliveries of one event, concurrent and late,
// have their effect once; a failed handling leaves no mark.
func TestRunLogOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	log := pgtx.RunLog{Table: pgx.Identifier{b.opts.Schema, "runs"}}
	if err := log.Create(bg, b.pool); err != nil {
		t.Fatal(err)
	}
	id := trigger.EventKey("550e8400-e29b-41d4-a716-446655440000", "evt_abc123")
	handle := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+b.rows+` (record_id, what) VALUES ($1, 'handled')`, idem.RecordID("s", "evt"))
		return err
	}
	boom := errors.New("downstream down")
	if err := log.Once(bg, b.pool, id, func(ctx context.Context, tx pgx.Tx) error {
		_ = handle(ctx, tx)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var handled, dup atomic.Int32
	for range 16 {
		wg.Go(func() {
			switch err := log.Once(bg, b.pool, id, handle); {
			case err == nil:
				handled.Add(1)
			case errors.Is(err, trigger.ErrAlreadyStarted):
				dup.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if handled.Load() != 1 || dup.Load() != 15 {
		t.Fatalf("handled %d, duplicates %d", handled.Load(), dup.Load())
	}
	if got := b.effects(t, "evt"); len(got) != 1 {
		t.Fatalf("effects %v", got)
	}
}

// TestCommitFails: the transaction fails at COMMIT (a deferred constraint):
// nothing of the operation remains, the key is released at once rather
// than left to its lease, and a retry runs.
func TestCommitFails(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	uniq := pgx.Identifier{b.opts.Schema, "uniq"}.Sanitize()
	if _, err := b.pool.Exec(bg, `CREATE TABLE `+uniq+` (v int, CONSTRAINT uniq_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	dup := true
	op := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := b.write("w")(ctx, tx); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+uniq+` VALUES (1)`); err != nil {
			return nil, err
		}
		if dup { // checked only at COMMIT
			if _, err := tx.Exec(ctx, `INSERT INTO `+uniq+` VALUES (1)`); err != nil {
				return nil, err
			}
		}
		return []byte("ok"), nil
	}
	_, err := b.store.Do(bg, b.eng, call("k"), op)
	if err == nil || !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("a failed COMMIT: %v", err)
	}
	if got := b.effects(t, "k"); len(got) != 0 {
		t.Fatalf("a failed COMMIT left %v", got)
	}
	if _, err := b.record(t, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record after a failed COMMIT: %v, want none", err)
	}
	dup = false
	if res, err := b.store.Do(bg, b.eng, call("k"), op); err != nil || res.Replayed {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := b.effects(t, "k"); len(got) != 1 {
		t.Fatalf("effects %v", got)
	}
}

// TestTakenOverHolderGetsLeaseLost: a holder learns from a lease renewal
// that another caller took its key over, and its context is canceled; an
// operation that then fails with the context's error (any operation that
// writes in its transaction does) makes Do return an error matching
// idem.ErrLeaseLost, so that the caller can tell "someone else has the key
// now" from a failure, and that still carries the operation's error.
func TestTakenOverHolderGetsLeaseLost(t *testing.T) {
	t.Parallel()
	// Renewed every 100 ms: the holder finds out soon after the takeover.
	b := setup(t, idem.Policy{Lease: 300 * time.Millisecond})
	wrote := make(chan struct{})
	stale := make(chan error, 1)
	go func() {
		_, err := b.store.Do(bg, b.eng, call("k"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			if _, err := b.write("stale")(ctx, tx); err != nil {
				return nil, err
			}
			close(wrote)
			<-ctx.Done() // stalls until the lease is lost
			return b.write("stale, later")(ctx, tx)
		})
		stale <- err
	}()
	<-wrote
	// The holder's renewals stop (a stopped process): it counts its lease
	// over first and its context is canceled, and another caller gets the
	// key, by a takeover or after the holder gave it back.
	pgtx.Stall(b.store, true)
	b.takeOver(t, "k", b.write("fresh"))
	pgtx.Stall(b.store, false)
	var err error
	select {
	case err = <-stale:
	case <-time.After(30 * time.Second):
		t.Fatal("the holder never learned that its key was taken over")
	}
	if !errors.Is(err, idem.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the holder got %v; want an error matching idem.ErrLeaseLost and carrying context.Canceled", err)
	}
	if got := b.effects(t, "k"); len(got) != 1 || got[0] != "fresh" {
		t.Fatalf("effects %v, want only the new holder's", got)
	}
}
