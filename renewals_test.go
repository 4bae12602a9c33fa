package idem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// renewCounter records when each fencing token was renewed.
type renewCounter struct {
	store.Store
	mu sync.Mutex
	at map[uint64][]time.Time
}

func (c *renewCounter) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	c.mu.Lock()
	c.at[f.Token] = append(c.at[f.Token], time.Now())
	c.mu.Unlock()
	return c.Store.Renew(ctx, f, lease)
}

func (c *renewCounter) times(tok uint64) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[tok]
}

func (c *renewCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.at {
		n += len(v)
	}
	return n
}

// TestRenewalAfterHangUp: the caller's context ends (a client hangs up)
// while the operation runs on regardless. Its lease is still renewed, so a
// retry finds the key in progress and the work does not start again.
func TestRenewalAfterHangUp(t *testing.T) {
	t.Parallel()
	// Long enough that a renewal every third of it gets through on a
	// loaded machine.
	const lease = 600 * time.Millisecond
	eng := idem.New(memory.New(), idem.Policy{Lease: lease, CleanupInterval: -1}, quiet)
	defer eng.Close()
	ctx, hangUp := context.WithCancel(bg)
	var runs atomic.Int32
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := eng.Do(ctx, call("k"), func(context.Context) ([]byte, error) {
			runs.Add(1)
			close(started)
			time.Sleep(4 * lease) // ignores its context
			return []byte("v"), nil
		})
		done <- err
	}()
	<-started
	hangUp()
	for i := range 6 {
		time.Sleep(lease / 2)
		_, err := eng.Do(bg, call("k"), func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		})
		if err != nil && !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("retry %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d times: the lease lapsed after the caller hung up", n)
	}
}

// TestRenewalsShareOneSchedule: many holds of one engine, started at
// different times and lasting from nothing to several leases. None is
// renewed before a third of its lease has passed, none goes a whole lease
// without a renewal while it runs, and once all have ended nothing is
// renewed any more.
func TestRenewalsShareOneSchedule(t *testing.T) {
	t.Parallel()
	const lease = 150 * time.Millisecond
	st := &renewCounter{Store: memory.New(), at: map[uint64][]time.Time{}}
	eng := idem.New(st, idem.Policy{Lease: lease, CleanupInterval: -1}, quiet)
	defer eng.Close()
	type run struct {
		long       time.Duration
		token      uint64
		start, end time.Time
	}
	runs := make([]run, 60)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i].long = time.Duration(rand.IntN(5*int(lease/time.Millisecond))) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
			_, err := eng.Do(bg, call(fmt.Sprint("k", i)), func(ctx context.Context) ([]byte, error) {
				runs[i].token, _ = idem.TokenFromContext(ctx)
				runs[i].start = time.Now()
				time.Sleep(runs[i].long)
				runs[i].end = time.Now()
				return []byte("v"), nil
			})
			if err != nil {
				t.Errorf("run %d (%v): %v", i, runs[i].long, err)
			}
		}()
	}
	wg.Wait()
	for i, r := range runs {
		at := st.times(r.token)
		if len(at) > 0 && at[0].Sub(r.start) < lease/3-5*time.Millisecond {
			t.Errorf("run %d: renewed %v after it started", i, at[0].Sub(r.start))
		}
		// The gaps that matter: from the start to the first renewal,
		// between renewals, and from the last to the end.
		last := r.start
		for _, a := range append(at, r.end) {
			if gap := a.Sub(last); gap >= lease {
				t.Errorf("run %d lasted %v: %v without a renewal (renewed %d times)", i, r.long, gap, len(at))
			}
			last = a
		}
	}
	after := st.total()
	time.Sleep(2 * lease)
	if n := st.total(); n != after {
		t.Errorf("%d renewals after every run ended", n-after)
	}
}
