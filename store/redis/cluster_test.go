package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
