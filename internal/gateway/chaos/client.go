package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Node is one gateway slot as the clients see it: the name of the process
// now running in it (one per incarnation) and its base URL, empty while it
// is down.
type Node struct {
	Name string
	URL  string
	// Health is a URL the watchdog polls to see the process stall (its
	// /healthz); empty: not watched.
	Health string
}

// Cluster is the gateways under test. The clients send to them, the nemesis
// hurts them. Every method is called from one goroutine at a time except
// Nodes, which is called from many.
type Cluster interface {
	Nodes() []Node
	Kill(slot int) error    // kill -9, and wait until it is gone
	Restart(slot int) error // a new process on the same store, until it is ready
	Pause(slot int) error   // SIGSTOP
	Resume(slot int) error  // SIGCONT
}

// clients send keyed charges to the cluster and retry them with the same
// key, as the mobile app does with its outbox: a patient client that waits
// long for each answer, and an impatient one (a duplicate tap, a retry
// after a client-side timeout) that moves on to another gateway.
type clients struct {
	cluster Cluster
	rec     *Recorder
	http    *http.Client

	mu       sync.Mutex // guards inflight
	inflight map[string]int
}

func newClients(c Cluster, rec *Recorder) *clients {
	return &clients{
		cluster: c,
		rec:     rec,
		// A new connection per attempt: net/http re-sends a POST that
		// carries an Idempotency-Key when a reused connection fails, which
		// would hide an attempt from the history.
		http:     &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		inflight: map[string]int{},
	}
}

// heldBy returns the slots that have a request in flight among ids.
func (c *clients) heldBy(ids []string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var slots []int
	for _, id := range ids {
		if s, ok := c.inflight[id]; ok {
			slots = append(slots, s)
		}
	}
	return slots
}

// work retries key until it gets a 2xx (then sends one more request, to see
// it replayed), an answer that ends the key (409 outcome_unknown or another
// conflict, a 4xx), or deadline passes.
func (c *clients) work(ctx context.Context, key, client string, amount int, timeout time.Duration, deadline time.Time) {
	body := fmt.Sprintf(`{"amount":%d,"currency":"eur"}`, amount)
	acked := false
	for n := 0; ctx.Err() == nil && time.Now().Before(deadline); n++ {
		nodes := c.cluster.Nodes()
		slot := rand.IntN(len(nodes))
		node := nodes[slot]
		if node.URL == "" {
			// Down (killed, not yet restarted): a client finds out from a
			// refused connection, which tells nothing about the key.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		id := fmt.Sprintf("%s-%s-%d", key, client, n)
		a := c.send(ctx, slot, node, key, id, body, timeout)
		a.Client = key + "/" + client
		c.rec.Attempt(a)
		switch {
		case a.Acknowledged() && acked:
			return
		case a.Acknowledged():
			acked = true
			time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
			continue
		case a.Status == http.StatusConflict && a.Problem == "in_progress",
			a.Status == 0, a.Status >= 500:
			// Retry: the holder is still at it, or the gateway could not
			// tell; the backoff is short so that the lease decides.
		default:
			return // an answer about the key: outcome_unknown, a 4xx
		}
		pause := time.Duration(50+rand.IntN(150)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

func (c *clients) send(ctx context.Context, slot int, node Node, key, id, body string, timeout time.Duration) (a Attempt) {
	a = Attempt{Key: key, RequestID: id, Gateway: node.Name, Sent: time.Now()}
	defer func() {
		if a.Received.IsZero() {
			a.Received = time.Now()
		}
	}()
	c.mu.Lock()
	c.inflight[id] = slot
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, node.URL+"/charges", strings.NewReader(body))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer sk_chaos") // one caller: the gateway refuses a keyed request without credentials
	req.Header.Set("X-Request-Id", id)
	res, err := c.http.Do(req)
	if err != nil {
		a.Err, a.Received = err.Error(), time.Now()
		return a
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	a.Received = time.Now()
	if err != nil {
		// A body cut short is no answer.
		a.Err = fmt.Sprintf("%d with a body cut short: %v", res.StatusCode, err)
		return a
	}
	a.Status, a.Body = res.StatusCode, b
	a.Replayed = res.Header.Get("Idempotent-Replayed") == "true"
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		var p struct {
			Type         string `json:"type"`
			ConflictType string `json:"conflict_type"`
		}
		if json.Unmarshal(b, &p) == nil {
			a.Problem = p.ConflictType
			if a.Problem == "" {
				if i := strings.LastIndexAny(p.Type, "#/"); i >= 0 {
					a.Problem = p.Type[i+1:]
				}
			}
		}
	}
	return a
}
