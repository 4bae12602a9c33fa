package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/replicas"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
)

// BenchmarkSyncReplicas is the cost of sync_replicas=1 on first calls (a
// reservation and a completion of a new key, 16 at a time, on the
// gateway's rueidis client): one primary with a replica (replication
// delayed by IDEM_BENCH_DELAY, default none), the store without
// SyncReplicas and with 1 (docs/bench/REPLICAS.md).
func BenchmarkSyncReplicas(b *testing.B) {
	r := replicas.StartRedis(b, replicas.RedisOptions{Delay: replicas.BenchDelay(b)})
	ctx := context.Background()
	value := make([]byte, 1024)
	var seq atomic.Int64
	for _, tc := range []struct {
		name string
		sync int
	}{{"async", 0}, {"sync_replicas=1", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			s := replicaStore(b, r.Addr(), redisstore.Options{SyncReplicas: tc.sync})
			b.SetParallelism(8) // 16 on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					req := request(fmt.Sprintf("k-%d", n), time.Hour)
					req.Record.Token = uint64(n)
					if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
						b.Errorf("Reserve: %+v, %v", res, err)
						return
					}
					if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Token: uint64(n)},
						State: store.Succeeded, Value: value, TTL: time.Hour}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
