package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// tcpProxy forwards connections to a store server, and can cut them: the
// store becomes unreachable for the gateway (connections reset, new ones
// refused) while its data stays where it is, as in a network partition.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool

	// deaf drops what the store answers while it is set; heard counts
	// the bytes sent to the store meanwhile, dropped those of its
	// answers.
	deaf    atomic.Bool
	heard   atomic.Int64
	dropped atomic.Int64
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *tcpProxy) pipe(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	go func() { io.Copy(s, &counting{c, p}); s.Close() }()
	io.Copy(&dropping{c, p}, s)
	c.Close()
}

// counting reads what the gateway sends to the store, counting it while
// the proxy is deaf.
type counting struct {
	io.Reader
	p *tcpProxy
}

func (c *counting) Read(b []byte) (int, error) {
	n, err := c.Reader.Read(b)
	if c.p.deaf.Load() {
		c.p.heard.Add(int64(n))
	}
	return n, err
}

// dropping writes the store's answers to the gateway, or drops them
// while the proxy is deaf.
type dropping struct {
	io.Writer
	p *tcpProxy
}

func (d *dropping) Write(b []byte) (int, error) {
	if d.p.deaf.Load() {
		d.p.dropped.Add(int64(len(b)))
		return len(b), nil
	}
	return d.Writer.Write(b)
}

// cut closes every connection and stops listening: dials are refused.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore listens again on the same address.
func (p *tcpProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// TestStoreOutage: the shared store becomes unreachable during traffic. The
// gateway answers 503 problem+json with Retry-After and runs nothing
// (fail closed), its /readyz says 503, and once the store is back it
// recovers without a restart; no outcome acknowledged before the outage is
// lost or executed again.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		dsn := migratedSchema(t, "idem_outage")
		outage(t, dsn)
	})
	t.Run("redis", func(t *testing.T) {
		outage(t, withParam(testenv.Redis(t), fmt.Sprintf("idem_prefix=idem-outage-%d:", rand.Uint32())))
	})
}

// behindProxy starts the demo API and a gateway in front of it whose
// store, dsn, it reaches through a tcpProxy.
func behindProxy(t *testing.T, dsn string) (*tcpProxy, *api, *gw) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	a := startAPI(t)
	return proxy, a, startGateway(t, a.URL, "", "", "--store", u.String(), "--migrate=false")
}

func outage(t *testing.T, dsn string) {
	proxy, a, g := behindProxy(t, dsn)
	prefix := fmt.Sprintf("outage-%d-", rand.Uint32())
	send := func(key string, amount int) (response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		return tryPost(ctx, g.URL+"/charges", fmt.Sprintf(`{"amount": %d}`, amount), "Idempotency-Key", prefix+key)
	}

	// Before: ten acknowledged outcomes.
	acked := map[string]string{}
	for i := range 10 {
		k := fmt.Sprint("before-", i)
		r, err := send(k, i)
		if err != nil || r.Status != 201 {
			t.Fatalf("before the outage: %v %d %s", err, r.Status, r.Body)
		}
		acked[k] = string(r.Body)
	}

	// Traffic runs throughout: new keys and replays.
	var (
		stop      atomic.Bool
		wg        sync.WaitGroup
		mu        sync.Mutex
		statuses  = map[int]int{}
		succeeded = map[string]string{} // key -> body of its 201s
		mismatch  []string
		// held counts traffic requests sent before the cut and answered
		// after the store came back: their outcome write was retried
		// across the outage (Engine.endWrite) rather than answered 503.
		held             int
		orphaned         int // 409 in_progress: see below
		cutAt, restoreAt atomic.Int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("during-%d-%d", w, i%25)
				sent := time.Now().UnixNano()
				r, err := send(k, 1000+i%25)
				if err != nil {
					continue
				}
				mu.Lock()
				if r.Status == 409 && bytes.Contains(r.Body, []byte("#in_progress")) {
					// A reservation cut off after the store applied it but
					// before its answer came back (the engine got EOF and
					// answered 503): the key stays in progress under a
					// token nobody holds until the engine frees it, once
					// the store answers again (TestLostReservationAnswer);
					// a retry before that is told so. Nothing ran.
					orphaned++
					mu.Unlock()
					continue
				}
				statuses[r.Status]++
				if c, rs := cutAt.Load(), restoreAt.Load(); c != 0 && sent < c && rs != 0 && time.Now().UnixNano() > rs {
					held++
				}
				if r.Status == 201 {
					if prev, ok := succeeded[k]; ok && prev != string(r.Body) {
						mismatch = append(mismatch, k)
					}
					succeeded[k] = string(r.Body)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)

	cutAt.Store(time.Now().UnixNano())
	proxy.cut()
	// Fail closed: 503 problem+json with Retry-After, for new keys and
	// for replays alike, and nothing runs.
	charges := a.stats(t).Charges
	deadline := time.Now().Add(20 * time.Second)
	var down response
	for {
		r, err := send(fmt.Sprint("probe-", rand.Uint32()), 1)
		if err == nil && r.Status == 503 {
			down = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 503 while the store is cut: %v %d %s", err, r.Status, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p := down.problem(t); !strings.HasSuffix(p["type"].(string), "#store_unavailable") || down.Header.Get("Retry-After") == "" {
		t.Errorf("503 = %v, Retry-After %q", p, down.Header.Get("Retry-After"))
	}
	if r, err := send("before-3", 3); err != nil || r.Status != 503 {
		t.Errorf("a replay during the outage: %v %d", err, r.Status)
	}
	if res, err := http.Get(g.Admin + "/readyz"); err != nil || res.StatusCode != 503 {
		t.Errorf("/readyz during the outage: %v %v", err, res)
	} else {
		res.Body.Close()
	}
	time.Sleep(500 * time.Millisecond)
	// Requests in flight at the cut may still finish their upstream call;
	// nothing new starts.
	during := a.stats(t).Charges
	if during > charges+4 {
		t.Errorf("the upstream ran %d times during the outage", during-charges)
	}

	restoreAt.Store(time.Now().UnixNano())
	proxy.restore()
	deadline = time.Now().Add(30 * time.Second)
	for {
		r, err := send(fmt.Sprint("after-", rand.Uint32()), 2)
		if err == nil && r.Status == 201 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not recover: %v %d %s\n%s", err, r.Status, r.Body, g.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	// Nothing acknowledged before the outage was lost or run again.
	for k, body := range acked {
		r, err := send(k, atoi(strings.TrimPrefix(k, "before-")))
		if err != nil || r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" || string(r.Body) != body {
			t.Errorf("%s after the outage: %v %d %v %s", k, err, r.Status, r.Header, r.Body)
		}
	}
	stats := a.stats(t)
	for k, n := range stats.Executions {
		if strings.HasPrefix(k, prefix) && n != 1 {
			t.Errorf("%s executed %d times", k, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(mismatch) > 0 {
		t.Errorf("keys answered with two different bodies: %v", mismatch)
	}
	// Each traffic worker either sent during the outage and got 503, or
	// was in flight at the cut and held until the store came back. When
	// all four were in flight at the cut (a slow upstream under -race),
	// none gets a 503, and that is right too.
	for s := range statuses {
		if s != 201 && s != 503 {
			t.Errorf("traffic saw %v; want only 201 and 503", statuses)
			break
		}
	}
	if statuses[201] == 0 || statuses[503] == 0 && held == 0 {
		t.Errorf("traffic saw %v with %d held across the outage; want 201s, and 503s or held requests", statuses, held)
	}
	t.Logf("traffic statuses: %v, %d held across the outage, %d in progress after a reservation cut mid-way; executions for %d keys", statuses, held, orphaned, len(stats.Executions))
	if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestLostReservationAnswer: the store applies a reservation, and its
// answer is lost with the connection (a cut between store and gateway at
// the wrong moment). The gateway answers 503 and runs nothing; once the
// store is back, the client's retry runs the call at once (the gateway
// freed the key its reservation held), instead of getting 409 in_progress
// until the lease runs out (60 s here).
func TestLostReservationAnswer(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		dsn := migratedSchema(t, "idem_lost")
		// One connection, on which the warm-up prepared the statements:
		// the reservation is then one round trip that PostgreSQL applies
		// whether or not its answer comes back (on a fresh connection,
		// pgx would wait for the statement's description first, which
		// the deaf proxy drops, and nothing would be applied).
		lostAnswer(t, withParam(dsn, "pool_max_conns=1"))
	})
	t.Run("redis", func(t *testing.T) {
		lostAnswer(t, withParam(testenv.Redis(t), fmt.Sprintf("idem_prefix=idem-lost-%d:", rand.Uint32())))
	})
}

func lostAnswer(t *testing.T, dsn string) {
	proxy, a, g := behindProxy(t, dsn)
	key := fmt.Sprintf("lost-%d", rand.Uint32())
	send := func(k string) (response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		return tryPost(ctx, g.URL+"/charges", `{"amount": 7}`, "Idempotency-Key", k)
	}
	// The gateway's connections to the store are open and idle.
	if r, err := send(key + "-warm"); err != nil || r.Status != 201 {
		t.Fatalf("warm-up: %v %d %s", err, r.Status, r.Body)
	}
	time.Sleep(100 * time.Millisecond)

	proxy.deaf.Store(true)
	first := make(chan response, 1)
	go func() {
		r, err := send(key)
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		first <- r
	}()
	// The reservation has gone to the store, which applied it and
	// answered; its answer is dropped. Then the connection breaks. (The
	// test waits for the answer, not for a fixed time after the request:
	// on a loaded machine the store could still be applying it.)
	deadline := time.Now().Add(10 * time.Second)
	for proxy.heard.Load() == 0 || proxy.dropped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the store did not answer the reservation: %d bytes sent, %d answered", proxy.heard.Load(), proxy.dropped.Load())
		}
		time.Sleep(time.Millisecond)
	}
	proxy.cut()
	r := <-first
	if r.Status != 503 || !bytes.Contains(r.Body, []byte("#store_unavailable")) {
		t.Fatalf("first call: %d %s; want 503 store_unavailable", r.Status, r.Body)
	}
	if n := a.stats(t).Executions[key]; n != 0 {
		t.Fatalf("ran %d times on a lost reservation", n)
	}
	proxy.deaf.Store(false)
	proxy.restore()

	// The retry runs within seconds: far sooner than the 60 s lease.
	deadline = time.Now().Add(15 * time.Second)
	var statuses []int
	for {
		r, err := send(key)
		if err == nil {
			statuses = append(statuses, r.Status)
			if r.Status == 201 {
				if r.Header.Get("Idempotent-Replayed") == "true" {
					t.Fatalf("the retry was a replay: %s", r.Body)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry did not run within 15 s: statuses %v, last %v %d %s\n%s", statuses, err, r.Status, r.Body, g.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := a.stats(t).Executions[key]; n != 1 {
		t.Fatalf("executed %d times", n)
	}
	// The store did hold the lost reservation, and the gateway freed it.
	if !strings.Contains(g.output(), "freed a reservation whose answer was lost") {
		t.Fatalf("no reservation was freed:\n%s", g.output())
	}
	// Operators see it in /metrics too. The counter moves just after the
	// free that let the retry run.
	const want = "\nidem_reservations_freed_total 1\n"
	var m string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, m = getStatus(t, g.Admin+"/metrics")
		if strings.Contains(m, want) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(m, want) {
		t.Fatalf("/metrics does not count the freed reservation:\n%s", grepLines(m, "idem_reservations_freed"))
	}
	t.Logf("retries before the call ran: %v", statuses)
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
