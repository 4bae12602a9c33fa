package workers

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestRunsEveryFunction runs many functions at once and one after another:
// each runs exactly once, and workers are reused rather than started anew
// for each call.
func TestRunsEveryFunction(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(100 * time.Millisecond)
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait()
	if ran.Load() != 1000 {
		t.Fatalf("ran %d of 1000", ran.Load())
	}
	// One after another: each call finds the previous one's worker idle.
	before := runtime.NumGoroutine()
	started := 0
	for range 200 {
		done := make(chan int)
		p.Go(func() { done <- runtime.NumGoroutine() })
		if n := <-done; n > before {
			started++
		}
		// The worker goes back to waiting: 2 ms leave it time to on a
		// loaded machine (50 µs did not always), far below the idle 100 ms.
		time.Sleep(2 * time.Millisecond)
	}
	if started > 50 {
		t.Fatalf("%d of 200 sequential calls started a new worker; idle ones should take them", started)
	}
	waitFor(t, base)
}

// waitFor waits until no more than n goroutines run.
func waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 5 s after the last call, %d before", runtime.NumGoroutine(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleWorkersExit checks that workers leave once idle, so nothing is
// left running when calls stop.
func TestIdleWorkersExit(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(20 * time.Millisecond)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		p.Go(func() { time.Sleep(time.Millisecond); wg.Done() })
	}
	wg.Wait()
	waitFor(t, base)
}
