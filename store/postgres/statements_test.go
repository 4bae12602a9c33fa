package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestStatementsPerCall: judging on the server's clock costs no statement:
// every call is one statement, the server's time coming back with the row,
// as when the caller sent its clock. Reading first (Options.ReadFirstAfter)
// adds the read for a key the read cannot answer, as it did; and taking
// over an earlier version's stale row adds one, once per such row.
func TestStatementsPerCall(t *testing.T) {
	t.Parallel()
	var counter statementCounter
	pool := openPool(t, testenv.Postgres(t), 1, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &counter })
	opts := freshSchema(t, pool)
	s := newTestStore(t, pool, opts)
	readFirst := opts
	readFirst.ReadFirstAfter = -1
	rs := newTestStore(t, pool, readFirst)
	ctx := context.Background()
	count := storetest.Counter(t, "statements", counter.n.Load)
	reserve := func(s *Store, req store.ReserveRequest, acquire bool) func() error {
		return func() error {
			res, err := s.Reserve(ctx, req)
			if err == nil && res.Acquired != acquire {
				t.Errorf("reserve %s: %+v, want acquired %v", req.Record.Key, res, acquire)
			}
			return err
		}
	}
	ok, failed := request("ok", 1), request("failed", 2)
	count("Reserve of a new key", 1, reserve(s, ok, true))
	count("Reserve of a held key", 1, reserve(s, request("ok", 3), false))
	count("Get", 1, func() error { _, err := s.Get(ctx, "test", ok.Record.KeyHash); return err })
	count("Renew", 1, func() error { return s.Renew(ctx, store.Fence{KeyHash: ok.Record.KeyHash, Token: 1}, time.Minute) })
	count("Complete", 1, func() error {
		return s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: ok.Record.KeyHash, Token: 1}, State: store.Succeeded, TTL: time.Hour})
	})
	count("Reserve of a completed key", 1, reserve(s, request("ok", 4), false))
	count("Reserve of a completed key, reading first", 1, reserve(rs, request("ok", 5), false))
	count("Reserve of a new key, reading first", 2, reserve(rs, failed, true))
	if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: failed.Record.KeyHash, Token: 2}, State: store.Failed, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	count("Release", 1, func() error { return s.Release(ctx, store.Fence{KeyHash: failed.Record.KeyHash, Token: 2}) })
	count("Cleanup with nothing expired", 1, func() error { _, err := s.Cleanup(ctx, 0); return err })

	// An earlier version's row, dead: the first look starts watching it,
	// the takeover a lease later reads it once more.
	e := &earlier{pool: pool, table: s.Table(), lease: 100 * time.Millisecond}
	if !e.reserve(t, "earlier", 6) {
		t.Fatal("the earlier version did not reserve")
	}
	taker := request("earlier", 7)
	taker.Lease = e.lease
	count("Reserve of an earlier version's held key", 1, reserve(s, taker, false))
	time.Sleep(e.lease + e.lease/2)
	count("Reserve taking over an earlier version's stale row", 2, reserve(s, taker, true))
}
