package pgtx_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkPairs compares, on one database, a call through the engine
// (reserve, operation, complete) on the plain path and with pgtx, at
// concurrency 1 and 16:
//
//   - plain/noop: the plain reserve/complete path, an operation that writes
//     nothing: the floor;
//   - plain/write: the operation inserts a row in its own transaction,
//     then the record is completed (at-least-once if the process dies in
//     between);
//   - pgtx/write: the row and the completion commit in one transaction.
//
// Run: go test -run '^$' -bench Pairs ./store/postgres/pgtx/
func BenchmarkPairs(b *testing.B) {
	for _, c := range []int{1, 16} {
		for _, mode := range []string{"plain/noop", "plain/write", "pgtx/write"} {
			b.Run(fmt.Sprintf("%s/c%d", mode, c), func(b *testing.B) {
				bn := setupBench(b, c)
				prefix := strconv.Itoa(b.N) + "-"
				insert := `INSERT INTO ` + bn.rows + ` (record_id, what) VALUES ($1, 'bench')`
				call := func(i uint64) idem.Call { return idem.Call{Scope: "s", Key: prefix + strconv.FormatUint(i, 10)} }
				var fn func(i uint64) error
				switch mode {
				case "plain/noop":
					fn = func(i uint64) error {
						_, err := bn.plain.Do(bg, call(i), func(context.Context) ([]byte, error) { return []byte("ok"), nil })
						return err
					}
				case "plain/write":
					fn = func(i uint64) error {
						_, err := bn.plain.Do(bg, call(i), func(ctx context.Context) ([]byte, error) {
							h, _ := idem.HoldFrom(ctx)
							_, err := bn.pool.Exec(ctx, insert, h.ID)
							return []byte("ok"), err
						})
						return err
					}
				case "pgtx/write":
					fn = func(i uint64) error {
						_, err := bn.store.Do(bg, bn.eng, call(i), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
							h, _ := idem.HoldFrom(ctx)
							_, err := tx.Exec(ctx, insert, h.ID)
							return []byte("ok"), err
						})
						return err
					}
				}
				storetest.RunRate(b, c, "pairs/s", fn)
			})
		}
	}
}

type benchBundle struct {
	*bundle
	plain *idem.Engine
}

// setupBench gives both paths a pool of 2c+4 connections: an open
// transaction keeps its connection while other callers reserve (see New).
func setupBench(b *testing.B, c int) benchBundle {
	bn := setup(b, idem.Policy{}, int32(2*c+4))
	plain := idem.New(bn.store.Store, idem.Policy{CleanupInterval: -1})
	b.Cleanup(func() { _ = plain.Close() })
	return benchBundle{bn, plain}
}
