package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/gateway/chaos"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// chaosLease is the gateways' lease in the fault suite: short, so that a
// holder paused for a few seconds loses its keys.
const chaosLease = time.Second

// chaosConfig is the gateways' configuration: the README's defaults, but an
// upstream_timeout shorter than the slow answers and a one-second lease.
const chaosConfig = `upstream_timeout: 1s
defaults:
  lease: 1s
`

// TestChaos is the fault suite (package internal/chaos) run against real
// gateways: three on PostgreSQL, three on Redis, one on the file store,
// one on the Pebble store (both first calls syncing once: OneSync),
// with kill -9 and SIGSTOP past the lease as nemeses and an upstream that
// answers late, resets and cuts its answers mid-body. The history checker
// must find no violation: no key run again unless its holder was killed or
// paused past its lease, no acknowledged outcome answered differently
// later, no acknowledgement without an execution.
//
// The default run takes about a minute for all three stores; IDEM_CHAOS=long
// (make chaos) runs several minutes per store.
func TestChaos(t *testing.T) {
	long := os.Getenv("IDEM_CHAOS") == "long"
	t.Run("postgres", func(t *testing.T) {
		dsn := migratedSchema(t, "idem_chaos")
		runChaos(t, "pg", 3, long, "--store", dsn, "--migrate=false")
	})
	t.Run("redis", func(t *testing.T) {
		url := testenv.Redis(t)
		prefix := fmt.Sprintf("idem-chaos-%d:", rand.Uint32())
		t.Cleanup(func() { dropRedisPrefix(t, url, prefix) })
		runChaos(t, "redis", 3, long, "--store", withParam(url, "idem_prefix="+prefix))
	})
	t.Run("file", func(t *testing.T) {
		// One gateway, killed and restarted on the same data directory.
		runChaos(t, "file", 1, long, "--store", "file:"+t.TempDir())
	})
	t.Run("pebble", func(t *testing.T) {
		runChaos(t, "pebble", 1, long, "--store", "pebble:"+t.TempDir())
	})
}

func runChaos(t *testing.T, name string, gateways int, long bool, storeArgs ...string) {
	rec := chaos.NewRecorder(chaosLease, chaos.OnUnknownConflict)
	up, err := chaos.StartUpstream(rec, chaos.Faults{
		Slow: 0.08, Reset: 0.04, Cut: 0.04,
		SlowFor: [2]time.Duration{1600 * time.Millisecond, 2400 * time.Millisecond},
		Delay:   [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close(context.Background()) })
	cfgFile := filepath.Join(t.TempDir(), "idem.yaml")
	if err := writeFile(cfgFile, chaosConfig); err != nil {
		t.Fatal(err)
	}
	c := &chaosCluster{t: t, name: name, args: append([]string{"serve", "--upstream", up.URL,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json",
		"--config", cfgFile}, storeArgs...)}
	for range gateways {
		c.slots = append(c.slots, &chaosSlot{})
	}
	for i := range c.slots {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := chaos.Config{
		Cluster: c, Upstream: up, Recorder: rec,
		Duration: 12 * time.Second, Keys: 6, KeyDeadline: 15 * time.Second,
		Patient: 10 * time.Second, Impatient: 2 * time.Second,
		KeyPrefix: fmt.Sprintf("chaos-%s-%d-", name, rand.Uint32()),
		Nemeses:   []string{chaos.EventPause, chaos.EventKill},
		Every:     2 * time.Second,
		Down:      300 * time.Millisecond,
		PauseFor:  [2]time.Duration{2 * time.Second, 3 * time.Second},
		Logf:      t.Logf,
	}
	if long {
		cfg.Duration, cfg.Keys = 3*time.Minute, 12
	}
	if err := chaos.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	// Every execution still running upstream ends and is logged.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := up.Close(ctx); err != nil {
		t.Errorf("upstream: %v", err)
	}
	h := rec.History()
	r := chaos.Check(h)
	if dir := os.Getenv("IDEM_CHAOS_HISTORY"); dir != "" {
		// The whole history, for a look at what the checker judged.
		b, err := json.MarshalIndent(h, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644)
		}
		if err != nil {
			t.Errorf("writing the history: %v", err)
		}
	}
	t.Logf("%s, %d gateway(s), lease %v, upstream_timeout 1s:\n%s", name, gateways, chaosLease, r)
	// The run must have done what it is for, or it proves nothing.
	if r.Acknowledged == 0 || r.Executions == 0 || r.Kills == 0 || r.Pauses == 0 || len(r.Faults) == 0 {
		t.Errorf("the run did not exercise the gateways: %d acknowledged keys, %d executions, %d kills, %d pauses, faults %v",
			r.Acknowledged, r.Executions, r.Kills, r.Pauses, r.Faults)
	}
	for i, v := range r.Violations {
		if i == 30 {
			t.Errorf("... and %d more violations", len(r.Violations)-i)
			break
		}
		t.Errorf("%s (at +%v)", v, v.At.Sub(h.Attempts[0].Sent).Round(time.Millisecond))
	}
}

// chaosCluster runs the gateways of one topology as processes that the
// nemesis can kill, restart and pause.
type chaosCluster struct {
	t    *testing.T
	name string
	args []string

	mu    sync.Mutex // guards slots' fields
	slots []*chaosSlot
}

type chaosSlot struct {
	gen, next int // the incarnation running (or last run), the next one
	g         *gw // nil while down
}

func (c *chaosCluster) Nodes() []chaos.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make([]chaos.Node, len(c.slots))
	for i, s := range c.slots {
		nodes[i].Name = fmt.Sprintf("%s%d#%d", c.name, i+1, s.gen)
		if s.g != nil {
			nodes[i].URL, nodes[i].Health = s.g.URL, s.g.Admin+"/healthz"
		}
	}
	return nodes
}

func (c *chaosCluster) gateway(slot int) (*gw, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.slots[slot].g; g != nil {
		return g, nil
	}
	return nil, fmt.Errorf("%s%d is down", c.name, slot+1)
}

func (c *chaosCluster) Kill(slot int) error {
	g, err := c.gateway(slot)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.slots[slot].g = nil // no new requests go to it
	c.mu.Unlock()
	g.kill() // SIGKILL, and wait for it
	return nil
}

func (c *chaosCluster) Pause(slot int) error {
	g, err := c.gateway(slot)
	if err != nil {
		return err
	}
	return syscall.Kill(g.cmd.Process.Pid, syscall.SIGSTOP)
}

func (c *chaosCluster) Resume(slot int) error {
	g, err := c.gateway(slot)
	if err != nil {
		return err
	}
	return syscall.Kill(g.cmd.Process.Pid, syscall.SIGCONT)
}

// Restart starts the slot's next gateway process on the same store and
// waits until it serves.
func (c *chaosCluster) Restart(slot int) error {
	c.mu.Lock()
	gen := c.slots[slot].next
	c.slots[slot].next++
	c.mu.Unlock()
	name := fmt.Sprintf("%s%d#%d", c.name, slot+1, gen)
	ready := make(chan [2]string, 1)
	p := start(c.t, "idem serve "+name, func(line string) {
		var m struct {
			Msg       string `json:"msg"`
			Addr      string `json:"addr"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "idem gateway listening" {
			select {
			case ready <- [2]string{m.Addr, m.AdminAddr}:
			default:
			}
		}
	}, c.args...)
	var addrs [2]string
	select {
	case addrs = <-ready:
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", name, p.err, p.output())
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not start\n%s", name, p.output())
	}
	g := &gw{proc: p, URL: "http://" + addrs[0], Admin: "http://" + addrs[1]}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(g.Admin + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("%s: /healthz not ready: %v\n%s", name, err, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	c.slots[slot].gen, c.slots[slot].g = gen, g
	c.mu.Unlock()
	return nil
}

// dropRedisPrefix deletes the keys a test wrote under prefix.
func dropRedisPrefix(t *testing.T, url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Logf("redis cleanup: %v", err)
		return
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, strings.ReplaceAll(prefix, "*", `\*`)+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}
