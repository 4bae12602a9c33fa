package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/internal/testkit/replicas"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/replication"
)

// replicaStore is a store on a rueidis client (the gateway's) through r's
// virtual IP.
func replicaStore(t testing.TB, addr string, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s, err := redisstore.NewRueidis(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestFailover runs keys through the engine on a Redis primary whose
// replica is 5 ms away while the primary is killed and the replica
// promoted, twice. With SyncReplicas 1 no key runs twice and no answered
// outcome changes. Without it the writes in flight on the link are lost:
// the test logs what that did (it varies from run to run).
func TestFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync int
	}{{"sync_replicas=1", 1}, {"async", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			r := replicas.StartRedis(t, replicas.RedisOptions{Delay: 5 * time.Millisecond})
			s := replicaStore(t, r.Addr(), redisstore.Options{Prefix: uniquePrefix(), SyncReplicas: tc.sync})
			replicas.RunFailover(t, replicas.FailoverTest{Store: s, Failover: r.Failover, SyncReplicas: tc.sync, Lease: 3 * time.Second})
		})
	}
}

// TestSyncReplicas: a store with SyncReplicas refuses at start a primary
// with too few replicas, and fails closed a write the replicas did not
// confirm.
func TestSyncReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	alone := replicas.StartRedis(t, replicas.RedisOptions{NoReplica: true})
	st, err := replicaStore(t, alone.Addr(), redisstore.Options{}).Replication(ctx)
	if err != nil || st.Mode != replication.None || st.Warn() {
		t.Fatalf("no replica: %+v, %v; want mode none, no warning", st, err)
	}
	if _, err := replicaStore(t, alone.Addr(), redisstore.Options{SyncReplicas: 1}).Replication(ctx); !errors.Is(err, replication.ErrUnsatisfiable) {
		t.Fatalf("sync_replicas=1 without a replica: %v; want ErrUnsatisfiable", err)
	}

	r := replicas.StartRedis(t, replicas.RedisOptions{})
	st, err = replicaStore(t, r.Addr(), redisstore.Options{}).Replication(ctx)
	if err != nil || st.Mode != replication.Async || st.Replicas != 1 || !st.Warn() {
		t.Fatalf("one replica: %+v, %v; want mode async, 1 replica, a warning", st, err)
	}
	if _, err := replicaStore(t, r.Addr(), redisstore.Options{SyncReplicas: 2}).Replication(ctx); !errors.Is(err, replication.ErrUnsatisfiable) {
		t.Fatalf("sync_replicas=2 with one replica: %v; want ErrUnsatisfiable", err)
	}
	s := replicaStore(t, r.Addr(), redisstore.Options{SyncReplicas: 1, SyncTimeout: 200 * time.Millisecond})
	st, err = s.Replication(ctx)
	if err != nil || st.Mode != replication.Sync || st.Synchronous != 1 {
		t.Fatalf("sync_replicas=1 with one replica: %+v, %v; want mode sync", st, err)
	}
	// With the replica up a write is confirmed: given the time a loaded
	// machine may need (200 ms was seen to pass), since what is checked is
	// that it is confirmed, not how fast. s, on the same records, is the
	// one that waits 200 ms once the link is cut.
	patient := replicaStore(t, r.Addr(), redisstore.Options{SyncReplicas: 1, SyncTimeout: 10 * time.Second})
	req := request("k1", time.Hour)
	if res, err := patient.Reserve(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Reserve with the replica up: %+v, %v", res, err)
	}
	// The replica stops taking the primary's stream: writes are applied
	// on the primary but not confirmed, and fail.
	r.Link().Cut()
	if _, err := s.Reserve(ctx, request("k2", time.Hour)); !errors.Is(err, replication.ErrNotReplicated) {
		t.Fatalf("Reserve with the link cut: %v; want ErrNotReplicated", err)
	}
	if err := s.Renew(ctx, store.Fence{KeyHash: req.Record.KeyHash, Token: req.Record.Token}, time.Minute); !errors.Is(err, replication.ErrNotReplicated) {
		t.Fatalf("Renew with the link cut: %v; want ErrNotReplicated", err)
	}
}
