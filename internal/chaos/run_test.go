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
// recorded as stalled; one the nemesis paused is not.
func TestWatchdog(t *testing.T) {
	var stall atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(stall.Swap(0)))
	}))
	defer srv.Close()
	rec := NewRecorder(time.Second, "")
	cfg := Config{Cluster: stallCluster{srv.URL}, Recorder: rec, StallAfter: 200 * time.Millisecond,
		Logf: func(string, ...any) {}}
	paused := &pauses{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchdog(ctx, cfg, paused); close(done) }()

	time.Sleep(150 * time.Millisecond)
	paused.start("g1#0", time.Now())
	stall.Store(int64(300 * time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	paused.end("g1#0", time.Now())
	time.Sleep(150 * time.Millisecond)
	if n := len(rec.History().Events); n != 0 {
		t.Fatalf("%d stalls recorded during a pause", n)
	}
	stall.Store(int64(300 * time.Millisecond))
	time.Sleep(600 * time.Millisecond)
	cancel()
	<-done
	h := rec.History()
	if len(h.Events) != 1 || h.Events[0].Kind != EventStall || h.Events[0].Gateway != "g1#0" ||
		h.Events[0].End.Sub(h.Events[0].Start) < 300*time.Millisecond {
		t.Fatalf("events %+v, want one stall of g1#0 of 300 ms or more", h.Events)
	}
}
