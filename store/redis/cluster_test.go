package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/replication"
	"github.com/idem-dev/idem/store/storetest"
)

// clusterPort returns a spare port whose cluster bus port (+10000) is
// spare too.
func clusterPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := sparePort(t)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatal("no spare port pair for a cluster node")
	return 0
}

// TestCluster runs the conformance suite through a ClusterClient on a
// three-primary Redis Cluster started for the test.
func TestCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	redisBinaries(t, "redis-server", "redis-cli")
	var addrs []string
	for range 3 {
		port := clusterPort(t)
		srv := startServerOn(t, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		addrs = append(addrs, srv.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitClusterOK(t, addrs)

	newCluster := func(t *testing.T, cte bool) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: cte})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	client := newCluster(t, true)
	storetest.Run(t, harness(client, func(t *testing.T) redis.UniversalClient { return newCluster(t, false) }))

	// Records spread over every primary: the hash tag is the key hash, not
	// the prefix.
	s, prefix := newStore(t, client)
	ctx := context.Background()
	for i := range 30 {
		if _, err := s.Reserve(ctx, request(fmt.Sprintf("spread-%d", i), time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	perNode := map[string]int{}
	err := client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, prefix+"*").Result()
		mu.Lock()
		perNode[c.Options().Addr] = len(keys)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if perNode[a] == 0 {
			t.Errorf("no record on primary %s: %v", a, perNode)
		}
	}
	t.Logf("30 records spread over the primaries: %v", perNode)
}

// waitClusterOK waits until every node reports cluster_state:ok.
func waitClusterOK(t *testing.T, addrs []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ok: %v\n%s", a, err, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
}

// TestClusterSyncReplicas: on a Redis Cluster of three primaries with a
// replica each, SyncReplicas 1 waits per shard (WAIT goes to the key's
// primary) and every write of keys spread over the shards is confirmed;
// SyncReplicas 2 is refused, per shard.
func TestClusterSyncReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	redisBinaries(t, "redis-server", "redis-cli")
	var addrs []string
	for range 6 {
		srv := startServerOn(t, clusterPort(t), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		addrs = append(addrs, srv.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitClusterOK(t, addrs)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	s, err := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix(), SyncReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Until each primary's replica is online, the store is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := s.Replication(ctx)
		if err == nil {
			if st.Mode != replication.Sync || st.Replicas != 1 {
				t.Fatalf("Replication: %+v; want sync, 1 replica per shard", st)
			}
			break
		}
		if !errors.Is(err, replication.ErrUnsatisfiable) || time.Now().After(deadline) {
			t.Fatalf("Replication: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 30 {
		req := request(fmt.Sprintf("spread-%d", i), time.Hour)
		if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
			t.Fatalf("Reserve %d: %+v, %v", i, res, err)
		}
		if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Token: req.Record.Token},
			State: store.Succeeded, Value: []byte("v"), TTL: time.Hour}); err != nil {
			t.Fatalf("Complete %d: %v", i, err)
		}
	}
	s2, err := redisstore.New(client, redisstore.Options{SyncReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Replication(ctx); !errors.Is(err, replication.ErrUnsatisfiable) {
		t.Fatalf("SyncReplicas 2 with one replica per shard: %v; want ErrUnsatisfiable", err)
	}
}
