package hold

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestBound(t *testing.T) {
	if got := Bound(0); got != Default {
		t.Errorf("Bound(0) = %v, want %v", got, Default)
	}
	if got := Bound(time.Second); got != time.Second {
		t.Errorf("Bound(1s) = %v", got)
	}
	if !AtOnce(Bound(-1)) || AtOnce(Bound(0)) {
		t.Error("a negative bound keeps nothing; zero keeps for Default")
	}
	// Kept at 5: sweep 6 may follow at once, sweep 8 is a bound later.
	if Due(5, 7) || !Due(5, 8) || !Due(^uint32(0), 2) {
		t.Error("Due: a reservation is due three sweeps after it was kept, across the counter's wrap")
	}
}

// TestSweeperStops: the sweeps run, and none runs after Stop returns.
func TestSweeperStops(t *testing.T) {
	var n atomic.Int64
	ran := make(chan struct{}, 1)
	w := Start(2*time.Millisecond, func(uint32) {
		n.Add(1)
		select {
		case ran <- struct{}{}:
		default:
		}
	})
	<-ran
	w.Stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond)
	if n.Load() != after {
		t.Fatalf("%d sweeps after Stop", n.Load()-after)
	}
	w.Stop() // twice is fine
	var none *Sweeper
	none.Stop()
}
