package testkit_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestClock(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock()
	if !c.Now().Equal(testkit.Epoch) {
		t.Fatalf("new clock reads %v", c.Now())
	}
	c.Add(90 * time.Second)
	if got := c.Now().Sub(testkit.Epoch); got != 90*time.Second {
		t.Fatalf("after Add: %v", got)
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c.Set(at)
	if !c.Now().Equal(at) {
		t.Fatalf("after Set: %v", c.Now())
	}
}

func TestFanOutRunsEachOnceTogether(t *testing.T) {
	t.Parallel()
	const n = 64
	var seen [n]atomic.Int32
	var inside, peak atomic.Int32
	testkit.FanOut(n, func(i int) {
		seen[i].Add(1)
		cur := inside.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inside.Add(-1)
	})
	for i := range seen {
		if got := seen[i].Load(); got != 1 {
			t.Fatalf("fn(%d) ran %d times", i, got)
		}
	}
	if peak.Load() < 2 {
		t.Fatalf("racers never overlapped (peak %d)", peak.Load())
	}
}
