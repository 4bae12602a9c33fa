package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/replicas"
)

// BenchmarkSyncReplicas is the cost of sync_replicas=1 on first calls (a
// reservation and a completion of a new key, 16 at a time): one primary
// with a synchronous standby (replication delayed by IDEM_BENCH_DELAY,
// default none), its sessions either waiting for the standby
// (synchronous_commit on, SyncReplicas 1) or not (synchronous_commit
// local, which is what an asynchronous standby gives); each go test run
// measures both, one after the other (docs/bench/REPLICAS.md).
func BenchmarkSyncReplicas(b *testing.B) {
	p := replicas.StartPG(b, replicas.PGOptions{Sync: true, Delay: replicas.BenchDelay(b)})
	ctx := context.Background()
	value := make([]byte, benchValueSize)
	var seq atomic.Int64
	for _, tc := range []struct {
		name   string
		commit string
		sync   int
	}{{"async", "local", 0}, {"sync_replicas=1", "on", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			pool := openPool(b, p.DSN(), 16, func(c *pgxpool.Config) {
				c.ConnConfig.RuntimeParams["synchronous_commit"] = tc.commit
			})
			opts := Options{Schema: "bench", SyncReplicas: tc.sync}
			if err := Migrate(ctx, pool, opts); err != nil {
				b.Fatal(err)
			}
			s := newTestStore(b, pool, opts)
			if _, err := s.Replication(ctx); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(8) // 16 on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := benchPair(ctx, s, fmt.Sprintf("k-%d", seq.Add(1)), value); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
