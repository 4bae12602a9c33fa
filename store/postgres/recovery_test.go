package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/replicas"
	"github.com/idem-dev/idem/store"
)

// TestRecovery runs a store against a server that freezes, crashes and
// comes back. While the server is gone, every call returns an error within
// its context's deadline (no hang, no panic); once it is back, the same
// Store works again, and everything completed before the crash is there.
func TestRecovery(t *testing.T) {
	t.Parallel()
	srv := replicas.StartPG(t, replicas.PGOptions{NoReplica: true})
	pool := openPool(t, srv.PrimaryDSN(), 4)
	ctx := context.Background()
	opts := Options{Schema: "idem"}
	if err := Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, pool, opts)

	var (
		seq       atomic.Uint64
		mu        sync.Mutex
		completed []store.ReserveRequest // Complete returned nil
	)
	// pair reserves and completes one new key, each call bounded by a
	// deadline, and returns the first error and the longest call.
	pair := func(deadline time.Duration) (longest time.Duration, err error) {
		n := seq.Add(1)
		req := request(fmt.Sprintf("k-%d", n), n)
		call := func(f func(ctx context.Context) error) error {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			defer func() { longest = max(longest, time.Since(start)) }()
			return f(cctx)
		}
		if err := call(func(ctx context.Context) error {
			res, err := s.Reserve(ctx, req)
			if err == nil && !res.Acquired {
				err = fmt.Errorf("fresh key %d not acquired", n)
			}
			return err
		}); err != nil {
			return longest, err
		}
		err = call(func(ctx context.Context) error {
			return s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: req.Record.KeyHash, Token: n},
				State: store.Succeeded, Value: []byte(req.Record.Key), TTL: time.Hour})
		})
		if err == nil {
			mu.Lock()
			completed = append(completed, req)
			mu.Unlock()
		}
		return longest, err
	}

	for range 100 {
		if _, err := pair(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Load runs in the background through every phase below.
	const deadline = 500 * time.Millisecond
	var (
		stop         = make(chan struct{})
		wg           sync.WaitGroup
		calls, fails atomic.Int64
		longestNanos atomic.Int64
		firstErrMu   sync.Mutex
		firstErrs    = map[string]int{}
		panicked     atomic.Value
	)
	for range 4 {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					panicked.Store(fmt.Sprint(p))
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				longest, err := pair(deadline)
				calls.Add(1)
				for {
					old := longestNanos.Load()
					if int64(longest) <= old || longestNanos.CompareAndSwap(old, int64(longest)) {
						break
					}
				}
				if err != nil {
					fails.Add(1)
					msg := err.Error()
					if len(msg) > 90 {
						msg = msg[:90]
					}
					firstErrMu.Lock()
					firstErrs[msg]++
					firstErrMu.Unlock()
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)

	// Phase 1: the server freezes with its connections open. Calls must
	// give up at their deadline, reporting it.
	srv.Signal(syscall.SIGSTOP)
	frozenCalls := calls.Load()
	time.Sleep(1500 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, deadline)
	begin := time.Now()
	_, err := s.Get(cctx, "test", store.HashKey("test", "k-1"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get from a frozen server: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(begin); took > deadline+time.Second {
		t.Errorf("Get from a frozen server took %v with a %v deadline", took, deadline)
	}
	srv.Signal(syscall.SIGCONT)
	t.Logf("frozen: %d pairs attempted during 1.5 s", calls.Load()-frozenCalls)
	time.Sleep(500 * time.Millisecond)

	// Phase 2: the server crashes (immediate stop: no shutdown checkpoint)
	// and stays down. Calls fail fast.
	crashed := time.Now()
	srv.Stop("immediate")
	failsBefore := fails.Load()
	time.Sleep(time.Second)
	for name, f := range map[string]func(context.Context) error{
		"Reserve": func(ctx context.Context) error { _, err := s.Reserve(ctx, request("down", 1)); return err },
		"Get": func(ctx context.Context) error {
			_, err := s.Get(ctx, "test", store.HashKey("test", "k-1"))
			return err
		},
		"Complete": func(ctx context.Context) error {
			return s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: store.HashKey("test", "down"), Token: 1},
				State: store.Succeeded, TTL: time.Hour})
		},
		"Cleanup": func(ctx context.Context) error { _, err := s.Cleanup(ctx, 0); return err },
	} {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		begin := time.Now()
		err := f(cctx)
		cancel()
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s against a stopped server: %v, want an error", name, err)
		}
		if took := time.Since(begin); took > deadline+time.Second {
			t.Errorf("%s against a stopped server took %v", name, took)
		}
	}
	if fails.Load() == failsBefore {
		t.Error("no call failed while the server was down")
	}

	// Phase 3: the server comes back. The same Store serves again.
	srv.Start()
	restarted := time.Now()
	var failedAfter int
	for {
		if _, err := pair(2 * time.Second); err == nil {
			break
		} else if time.Since(restarted) > 15*time.Second {
			t.Fatalf("the store did not recover within 15 s of the restart: %v", err)
		} else {
			failedAfter++
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the background load succeed again
	close(stop)
	wg.Wait()
	if p := panicked.Load(); p != nil {
		t.Fatalf("a call panicked: %v", p)
	}
	if l := time.Duration(longestNanos.Load()); l > deadline+time.Second {
		t.Errorf("the longest call took %v with a %v deadline", l, deadline)
	}
	t.Logf("background: %d pairs, %d failed; longest call %v (deadline %v); failed pairs after restart before the first success: %d; down %v",
		calls.Load(), fails.Load(), time.Duration(longestNanos.Load()), deadline, failedAfter, restarted.Sub(crashed).Round(time.Millisecond))
	for msg, n := range firstErrs {
		t.Logf("  %4d × %s", n, msg)
	}

	// Everything whose Complete returned nil survived the crash.
	mu.Lock()
	defer mu.Unlock()
	for _, req := range completed {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := s.Get(cctx, "test", req.Record.KeyHash)
		cancel()
		if err != nil || got.State != store.Succeeded || string(got.Value) != req.Record.Key {
			t.Fatalf("record %s after the crash: %+v, %v", req.Record.Key, got, err)
		}
	}
	t.Logf("%d completed records, all present after the crash", len(completed))
}
