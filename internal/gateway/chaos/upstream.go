package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The upstream's faults.
const (
	FaultSlow  = "slow"  // answers after the gateway's upstream_timeout
	FaultReset = "reset" // runs, then resets the connection: no answer
	FaultCut   = "cut"   // runs, announces Content-Length 1000, sends half, drops
)

// Faults are the chances, per execution, that the upstream misbehaves, and
// how long it takes.
type Faults struct {
	Slow, Reset, Cut float64
	// SlowFor is how long a slow answer takes: past the gateway's
	// upstream_timeout, so the gateway gives up waiting first.
	SlowFor [2]time.Duration
	// Delay is how long an ordinary execution takes, long enough for a
	// nemesis to catch a gateway while it holds the key.
	Delay [2]time.Duration
}

// Upstream is the API behind the gateways: a payments API that counts every
// execution, answers each with a body no other execution has, and
// misbehaves as Faults says. Only keyed requests count.
type Upstream struct {
	faults Faults
	rec    *Recorder
	seq    atomic.Int64
	srv    *http.Server
	URL    string

	running sync.WaitGroup // executions not yet logged

	mu       sync.Mutex // guards inflight
	inflight map[string]string
}

// StartUpstream listens on 127.0.0.1 and records every execution in rec.
func StartUpstream(rec *Recorder, f Faults) (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &Upstream{faults: f, rec: rec, URL: "http://" + ln.Addr().String(), inflight: map[string]string{}}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go u.srv.Serve(ln)
	return u, nil
}

// Close stops the upstream, waiting up to ctx for the executions in flight
// to end and be logged (Shutdown alone does not wait for the hijacked
// connections of resets and cuts).
func (u *Upstream) Close(ctx context.Context) error {
	err := u.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { u.running.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InFlight returns the request IDs of the executions running now.
func (u *Upstream) InFlight() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := make([]string, 0, len(u.inflight))
	for id := range u.inflight {
		ids = append(ids, id)
	}
	return ids
}

func between(r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + rand.N(r[1]-r[0])
}

func (u *Upstream) pick() string {
	x := rand.Float64()
	switch {
	case x < u.faults.Slow:
		return FaultSlow
	case x < u.faults.Slow+u.faults.Reset:
		return FaultReset
	case x < u.faults.Slow+u.faults.Reset+u.faults.Cut:
		return FaultCut
	}
	return ""
}

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if _, err := io.Copy(io.Discard, r.Body); err != nil || key == "" || r.Method != http.MethodPost {
		http.Error(w, "a keyed POST with a whole body, please", http.StatusBadRequest)
		return
	}
	u.running.Add(1)
	id := r.Header.Get("X-Request-Id")
	e := Execution{Key: key, RequestID: id, Token: r.Header.Get("Idempotency-Token"),
		Start: time.Now(), Status: http.StatusCreated, Fault: u.pick()}
	n := u.seq.Add(1)
	e.Body = []byte(fmt.Sprintf(`{"id":"ch_%d","object":"charge","key":%q,"request_id":%q}`, n, key, id))
	u.mu.Lock()
	u.inflight[id] = key
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.inflight, id)
		u.mu.Unlock()
		e.End = time.Now()
		u.rec.Execution(e)
		u.running.Done()
	}()

	// The work runs to its end whether or not the gateway still waits.
	if e.Fault == FaultSlow {
		time.Sleep(between(u.faults.SlowFor))
	} else {
		time.Sleep(between(u.faults.Delay))
	}
	switch e.Fault {
	case FaultReset:
		if c := hijack(w); c != nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // close sends RST
			}
			c.Close()
		}
		return
	case FaultCut:
		// The whole answer would be 1000 bytes; half of it is sent.
		const tail = `,"pad":""}`
		pad := strings.Repeat("x", 1000-(len(e.Body)-1)-len(tail))
		e.Body = append(e.Body[:len(e.Body)-1], `,"pad":"`+pad+`"}`...)
		if c := hijack(w); c != nil {
			fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(e.Body))
			c.Write(e.Body[:len(e.Body)/2])
			c.Close()
		}
		return
	}
	if r.Context().Err() != nil {
		return // the gateway hung up: nothing is delivered
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, err := w.Write(e.Body)
	if err == nil {
		err = http.NewResponseController(w).Flush()
	}
	e.Delivered = err == nil && r.Context().Err() == nil
}

func hijack(w http.ResponseWriter) net.Conn {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	return c
}
