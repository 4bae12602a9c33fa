package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// stallCluster is one gateway whose health endpoint answers late when told.
type stallCluster struct{ url string }

func (c stallCluster) Nodes() []Node {
	return []Node{{Name: "g1#0", URL: c.url, Health: c.url + "/healthz"}}
}
func (stallCluster) Kill(int) error    { return nil }
func (stallCluster) Restart(int) error { return nil }
func (stallCluster) Pause(int) error   { return nil }
func (stallCluster) Resume(int) error  { return nil }

// TestWatchdog: a gateway that answers its health probe late, unpaused, is
// recorded as stalled; one the nemesis paused is not. The test follows the
// probes themselves (the stalled one answered, the watchdog sent the next),
// never fixed sleeps, and ignores stalls a loaded machine adds elsewhere.
func TestWatchdog(t *testing.T) {
	type span struct{ start, end time.Time }
	var stall, probes atomic.Int64
	stalled := make(chan span, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := time.Duration(stall.Swap(0))
		probes.Add(1) // after the swap: a probe counted has taken its stall or not
		if d > 0 {
			s := time.Now()
			time.Sleep(d)
			stalled <- span{s, time.Now()}
		}
	}))
	defer srv.Close()
	rec := NewRecorder(time.Second, "")
	cfg := Config{Cluster: stallCluster{srv.URL}, Recorder: rec, StallAfter: 200 * time.Millisecond,
		Logf: func(string, ...any) {}}
	paused := &pauses{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchdog(ctx, cfg, paused); close(done) }()

	// waitProbes returns once n more probes have come.
	waitProbes := func(n int64) {
		t.Helper()
		for want, deadline := probes.Load()+n, time.Now().Add(30*time.Second); probes.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d probes, want %d", probes.Load(), want)
			}
		}
	}
	// stallOnce makes the next probe take 300 ms, and returns once the
	// watchdog has judged it (it sends the next probe only after).
	stallOnce := func() span {
		t.Helper()
		stall.Store(int64(300 * time.Millisecond))
		var sp span
		select {
		case sp = <-stalled:
		case <-time.After(30 * time.Second):
			t.Fatal("no probe came")
		}
		waitProbes(1)
		return sp
	}
	covers := func(e Event, sp span) bool { return !e.Start.After(sp.start) && !e.End.Before(sp.end) }

	paused.start("g1#0", time.Now())
	during := stallOnce()
	paused.end("g1#0", time.Now())
	// The second probe to come from now was sent after the first one
	// ended, so after the pause: the stalled probe overlaps no pause.
	waitProbes(2)
	after := stallOnce()
	cancel()
	<-done
	h := rec.History()
	var found bool
	for _, e := range h.Events {
		if covers(e, during) {
			t.Errorf("a stall recorded during a pause: %+v", e)
		}
		if covers(e, after) && e.Kind == EventStall && e.Gateway == "g1#0" && e.End.Sub(e.Start) >= 300*time.Millisecond {
			found = true
		}
	}
	if !found {
		t.Fatalf("events %+v, want a stall of g1#0 of 300 ms or more around %v", h.Events, after)
	}
}
