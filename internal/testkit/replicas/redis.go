package replicas

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// RedisOptions shape a Redis primary and its replica.
type RedisOptions struct {
	// Delay is added to each direction of the replication link.
	Delay time.Duration
	// NoReplica starts the primary alone; Failover is then not possible.
	NoReplica bool
	// Args are more redis-server arguments for every server.
	Args []string
}

// Redis is a Redis primary with a replica, without persistence, each on
// its own port and directory. Clients reach the primary through VIP, a
// forwarder standing for a virtual IP; the replica replicates through a
// forwarder that delays the link by RedisOptions.Delay.
type Redis struct {
	t    testing.TB
	opts RedisOptions
	// VIP is the address clients use; Failover moves it to the new
	// primary.
	VIP              *Forwarder
	primary, replica *redisNode
	link             *Forwarder
}

type redisNode struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func (n *redisNode) addr() string { return hostPort(n.port) }

// StartRedis starts a primary, and unless opts.NoReplica a replica of it,
// and waits until the replica is in sync. Everything stops when t ends.
func StartRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	r := &Redis{t: t, opts: opts}
	r.primary = r.startNode("")
	r.VIP = NewForwarder(t, r.primary.addr(), 0)
	if !opts.NoReplica {
		r.attachReplica()
	}
	return r
}

// Addr is the primary's address through the virtual IP.
func (r *Redis) Addr() string { return r.VIP.Addr() }

// PrimaryAddr and ReplicaAddr are the servers' own addresses.
func (r *Redis) PrimaryAddr() string { return r.primary.addr() }
func (r *Redis) ReplicaAddr() string { return r.replica.addr() }

// Link is the replication link of the current replica: Cut stops the
// replica from receiving the primary's writes.
func (r *Redis) Link() *Forwarder { return r.link }

// Failover does what a failover does when the primary's machine dies: the
// primary is killed with SIGKILL, the replication link drops what is in
// flight, the replica is promoted (REPLICAOF NO ONE) and the virtual IP
// moved to it. Connections through the virtual IP break. Then a new
// replica of the new primary is started and synced, so that the pair can
// fail over again.
func (r *Redis) Failover() {
	r.t.Helper()
	old := r.primary
	r.kill(old)
	r.link.Cut()
	r.VIP.Cut()
	c := redis.NewClient(&redis.Options{Addr: r.replica.addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
		r.t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	r.primary, r.replica = r.replica, nil
	r.VIP.Switch(r.primary.addr())
	r.attachReplica()
}

// attachReplica starts a replica of the primary through a new delaying
// link and waits until it is in sync.
func (r *Redis) attachReplica() {
	r.t.Helper()
	if r.link != nil {
		r.link.Close()
	}
	r.link = NewForwarder(r.t, r.primary.addr(), r.opts.Delay)
	r.replica = r.startNode(r.link.Addr())
	c := redis.NewClient(&redis.Options{Addr: r.replica.addr(), MaxRetries: -1})
	defer c.Close()
	pc := redis.NewClient(&redis.Options{Addr: r.primary.addr(), MaxRetries: -1})
	defer pc.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		// In sync on both sides: the replica's link is up, and the
		// primary lists it online (what WAIT and INFO count).
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			if pinfo, err := pc.Info(context.Background(), "replication").Result(); err == nil && strings.Contains(pinfo, "state=online") {
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.replica.dir, "redis.log"))
			r.t.Fatalf("the replica is not in sync: %v %s\n%s", err, info, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startNode starts redis-server, a replica of primaryAddr unless it is "".
func (r *Redis) startNode(primaryAddr string) *redisNode {
	r.t.Helper()
	n := &redisNode{port: spare(r.t), dir: r.t.TempDir()}
	args := []string{"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", n.dir, "--logfile", filepath.Join(n.dir, "redis.log"),
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	if primaryAddr != "" {
		host, port, _ := strings.Cut(primaryAddr, ":")
		args = append(args, "--replicaof", host, port)
	}
	args = append(args, r.opts.Args...)
	n.cmd = exec.Command("redis-server", args...)
	n.cmd.Dir = n.dir
	if err := n.cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	r.t.Cleanup(func() { r.kill(n) })
	c := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			r.t.Fatalf("redis-server on %s did not start: %v\n%s", n.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Redis) kill(n *redisNode) {
	if n == nil || n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.cmd = nil
}
