package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// SkewLease is the lease of the clock-skew tests: short, so that the
// holders' renewals and the takeovers they allow happen within a test, and
// long enough for a renewal every third of it on a loaded machine.
const SkewLease = time.Second

// Skews are the offsets of the retrier's clock from the holder's, in
// leases: equal, half a lease, and the 2 and 10 leases at which every key
// once ran twice, in both directions.
var Skews = []float64{0, 0.5, -0.5, 2, -2, 10, -10}

// Skewed is a wall clock leases leases (of SkewLease) off this machine's.
func Skewed(leases float64) func() time.Time {
	d := time.Duration(leases * float64(SkewLease))
	return func() time.Time { return time.Now().Add(d) }
}

// TakeoverOverdue reports whether a retry of a dead holder's key that
// began at try, and still found the key in progress, came a whole lease
// after the end of the taker's first look (firstLook): the lease rule
// says that try must take the key over. Counting from the taker's own
// calls, not from the reservation, keeps the check true on a loaded
// machine, where each call to the store may take a good part of a lease.
func TakeoverOverdue(firstLook, try time.Time) bool {
	return try.Sub(firstLook) >= SkewLease
}

// skewWork is the work of a clock-skew test's key: it closes started on
// the key's first run, then works 2.5 leases unless ctx ends first.
func skewWork(ctx context.Context, runs *atomic.Int32, started chan struct{}) ([]byte, error) {
	if runs.Add(1) == 1 {
		close(started)
	}
	select {
	case <-time.After(SkewLease * 5 / 2):
		return []byte("done"), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// peerOf returns a second client of s's backend when the harness has one,
// else s itself (a store one process owns).
func peerOf(t *testing.T, h Harness, s store.Store) store.Store {
	if h.Peer == nil {
		return s
	}
	p := h.Peer(t, s)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// testClockSkew: two replicas whose clocks disagree by 0 to 10 leases, in
// both directions (SkewScenario). One holds each key and works 2.5 leases,
// renewing on time; the other retries every quarter lease until the first
// has finished. No live holder is ever taken over: each key runs once, and
// the retries end with its outcome.
func testClockSkew(t *testing.T, h Harness) {
	s := newStore(t, h)
	SkewScenario{Holder: s, Retrier: peerOf(t, h, s), Keys: 3, Rounds: 3, WantInProgress: true}.Run(t)
}

// testDeadHolderSkew: a holder dies right after reserving its key (kill
// -9), and a replica whose clock is 0 to 10 leases off retries it every
// quarter lease. Its first try that begins a lease after its first look
// ended takes the key over (TakeOverDead).
func testDeadHolderSkew(t *testing.T, h Harness) {
	s := newStore(t, h)
	peer := peerOf(t, h, s)
	p := idem.Policy{Lease: SkewLease, TTL: time.Hour, CleanupInterval: -1}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	for _, skew := range Skews {
		retrier := idem.New(peer, p, idem.WithClock(Skewed(skew)))
		t.Cleanup(func() { retrier.Close() })
		wg.Go(func() {
			call := idem.Call{Scope: "test", Key: fmt.Sprintf("%s-%v", uniqueKey(t), skew), Fingerprint: "fp"}
			dead := store.ReserveRequest{
				Record: store.Record{KeyHash: store.HashKey(call.Scope, call.Key), Scope: call.Scope, Key: call.Key,
					Fingerprint: call.Fingerprint, State: store.InProgress, Token: newToken(), RequestID: "dead"},
				Lease: SkewLease, TTL: time.Hour,
			}
			if res, err := s.Reserve(context.Background(), dead); err != nil || !res.Acquired {
				t.Errorf("skew %v: the dead holder's reservation: %+v %v", skew, res, err)
				return
			}
			died := time.Now()
			if err := TakeOverDead(retrier, call); err != nil {
				t.Errorf("skew %v leases: dead holder's key: %v", skew, err)
				return
			}
			mu.Lock()
			worst = max(worst, time.Since(died))
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("dead holders' keys taken over within %v at most (lease %v)", worst, SkewLease)
}

// skewRun is one run of a key's work in testClockSkew: its context, and
// whether its holder gave its lease up by its own count. Guarded by the
// test's lock.
type skewRun struct {
	ctx  context.Context
	lost bool
}

// SkewTracker watches one key's runs in a clock-skew test for a takeover
// of a live holder: a run started while another run's context was live,
// unless that other run gave its lease up by its own count (its renewals
// too slow on a loaded machine: its context canceled with
// ErrLeaseExpired, perhaps late, as after any pause of its process). A
// holder told by the store that its key was taken over is no excuse.
// The zero value is ready; give every replica's Do the one Work.
type SkewTracker struct {
	mu       sync.Mutex
	active   []*skewRun
	suspects []*skewRun
}

// Work returns the key's work, watched: its first run closes started, and
// each run takes two and a half leases (SkewLease) unless its context
// ends first; runs counts them.
func (tr *SkewTracker) Work(runs *atomic.Int32, started chan struct{}) idem.Func {
	return func(ctx context.Context) ([]byte, error) {
		me := &skewRun{ctx: ctx}
		tr.mu.Lock()
		for _, o := range tr.active {
			if o.ctx.Err() == nil {
				tr.suspects = append(tr.suspects, o)
			}
		}
		tr.active = append(tr.active, me)
		tr.mu.Unlock()
		defer func() {
			tr.mu.Lock()
			me.lost = errors.Is(context.Cause(ctx), idem.ErrLeaseExpired)
			tr.active = slices.DeleteFunc(tr.active, func(o *skewRun) bool { return o == me })
			tr.mu.Unlock()
		}()
		return skewWork(ctx, runs, started)
	}
}

// Overlaps returns how many runs were taken over while live.
func (tr *SkewTracker) Overlaps() (n int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, o := range tr.suspects {
		if !o.lost {
			n++
		}
	}
	return n
}
