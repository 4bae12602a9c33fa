package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// EngineClockSkew runs two replicas, engines over a holder's and a
// retrier's store client of their own, whose clocks are 0, 0.5, 2 and 10
// leases apart in both directions. For 20 keys per offset one holds the
// key and works 2.5 leases, renewing on time, while the other retries the
// key every quarter lease: no live holder is taken over (a second run
// never starts while the first's context is live). A holder whose
// renewals do not get through in time gives its lease up by its own
// count, and its key may run again after its context ended; that is
// counted apart. Then 5 holders per offset, each on a client of its own
// that dying makes, die half a lease into their work (kill closes their
// client: not another write), and the other replica, retrying every
// quarter lease, takes each key over on its first try that begins a
// lease after its first look ended (within two leases of the death on a
// quiet machine; the table logs how long it took).
//
// It is for stores whose replicas share a backend over the network, each
// with clients of its own (store/postgres, store/redis).
func EngineClockSkew(t *testing.T, holder, retrier store.Store, dying func(t *testing.T) (s store.Store, kill func())) {
	const liveKeys, deadKeys = 20, 5
	p := idem.Policy{Lease: SkewLease, TTL: time.Hour, CleanupInterval: -1}
	quiet := idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	clock := func(leases float64) idem.Option { return idem.WithClock(Skewed(leases)) }
	prefix := fmt.Sprintf("skew-%d", time.Now().UnixNano())
	var (
		mu      sync.Mutex
		twice   = map[float64]int{}
		errs    = map[float64][]string{}
		takeovr = map[float64]time.Duration{}
		gaveUp  = map[float64]int{}
	)
	note := func(skew float64, format string, args ...any) {
		mu.Lock()
		errs[skew] = append(errs[skew], fmt.Sprintf(format, args...))
		mu.Unlock()
	}

	// Live holders. An offset whose holders all gave their lease up (the
	// backend stalled past a lease: renewals did not get through) tested
	// nothing in that round; it runs again, up to liveRounds rounds.
	const liveRounds = 3
	var wg sync.WaitGroup
	pending := Skews
	for round := 1; len(pending) > 0; round++ {
		for _, skew := range pending {
			gaveUp[skew] = 0 // before any goroutine of the round writes the map
		}
		for _, skew := range pending {
			h := idem.New(holder, p, clock(0), quiet)
			r := idem.New(retrier, p, clock(skew), quiet)
			t.Cleanup(func() { h.Close(); r.Close() })
			for k := range liveKeys {
				wg.Go(func() {
					call := idem.Call{Scope: "test", Key: fmt.Sprintf("%s-live-%d-%v-%d", prefix, round, skew, k), Fingerprint: "fp"}
					var (
						runs    atomic.Int32
						tracker SkewTracker
						gave    bool // a run gave its lease up by its own count
					)
					started := make(chan struct{})
					fn := tracker.Work(&runs, started)
					held := make(chan error, 1)
					go func() { _, err := h.Do(context.Background(), call, fn); held <- err }()
					<-started
					// holderEnded reads the holder's result.
					holderEnded := func(err error) {
						switch {
						case errors.Is(err, idem.ErrLeaseLost):
							// Its renewals did not get through in time (a
							// loaded machine) and it gave its lease up, as
							// it must: the key may run again, after its
							// context ended.
							gave = true
						case err != nil:
							note(skew, "holder: %v", err)
						}
					}
					deadline := time.Now().Add(30 * SkewLease)
					holding := true
				retry:
					for {
						if holding {
							select {
							case err := <-held:
								holding = false
								holderEnded(err)
							case <-time.After(SkewLease / 4):
							}
						} else {
							time.Sleep(SkewLease / 4)
						}
						res, err := r.Do(context.Background(), call, fn)
						switch {
						case errors.Is(err, idem.ErrInProgress) && time.Now().Before(deadline):
						case errors.Is(err, idem.ErrLeaseLost):
							gave = true
							break retry
						case err != nil:
							note(skew, "retry: %v", err)
							break retry
						case !res.Replayed:
							break retry // the retrier ran the work: a second run
						case !holding:
							if string(res.Value) != "done" {
								note(skew, "replayed %q", res.Value)
							}
							break retry
						}
					}
					if holding {
						holderEnded(<-held)
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case tracker.Overlaps() > 0:
						twice[skew]++ // a live holder taken over
					case gave:
						gaveUp[skew]++
					case runs.Load() != 1:
						twice[skew]++
					}
				})
			}
		}
		wg.Wait()
		var again []float64
		for _, skew := range pending {
			if gaveUp[skew] == liveKeys && round < liveRounds {
				again = append(again, skew)
			}
		}
		if len(again) > 0 {
			t.Logf("round %d: every holder gave its lease up at offsets %v (renewals did not get through in time); running them again", round, again)
		}
		pending = again
	}

	// Dead holders.
	type dyingClient struct {
		s    store.Store
		kill func()
	}
	clients := make([]dyingClient, len(Skews))
	for i := range clients {
		clients[i].s, clients[i].kill = dying(t)
	}
	for i, skew := range Skews {
		wg.Go(func() {
			kill := clients[i].kill
			d := idem.New(clients[i].s, p, clock(0), quiet)
			r := idem.New(retrier, p, clock(skew), quiet)
			defer r.Close()
			defer d.Close()
			killed := make(chan struct{})
			var holders sync.WaitGroup
			calls := make([]idem.Call, deadKeys)
			for k := range calls {
				calls[k] = idem.Call{Scope: "test", Key: fmt.Sprintf("%s-dead-%v-%d", prefix, skew, k), Fingerprint: "fp"}
				started := make(chan struct{})
				holders.Go(func() {
					_, _ = d.Do(context.Background(), calls[k], func(context.Context) ([]byte, error) {
						close(started)
						<-killed
						return []byte("never stored"), nil
					})
				})
				<-started
			}
			time.Sleep(SkewLease / 2)
			kill()
			died := time.Now()
			close(killed)
			var retries sync.WaitGroup
			for _, call := range calls {
				retries.Go(func() {
					var firstLook time.Time
					for {
						try := time.Now()
						res, err := r.Do(context.Background(), call, func(context.Context) ([]byte, error) { return []byte("taken"), nil })
						if firstLook.IsZero() {
							firstLook = time.Now()
						}
						if errors.Is(err, idem.ErrInProgress) && TakeoverOverdue(firstLook, try) {
							note(skew, "dead holder's key still in progress on a try %v after the first look ended, more than a lease",
								try.Sub(firstLook).Round(time.Millisecond))
							return
						}
						if errors.Is(err, idem.ErrInProgress) && time.Since(died) < 20*SkewLease {
							time.Sleep(SkewLease / 4)
							continue
						}
						took := time.Since(died)
						if err != nil || !res.TookOver {
							note(skew, "dead holder's key: %+v %v after %v", res, err, took)
							return
						}
						mu.Lock()
						takeovr[skew] = max(takeovr[skew], took)
						mu.Unlock()
						return
					}
				})
			}
			retries.Wait()
			holders.Wait()
		})
	}
	wg.Wait()

	var table []string
	for _, skew := range Skews {
		table = append(table, fmt.Sprintf("retrier %+5.1f leases: live keys run twice %2d of %d (%d holders gave their lease up for slow renewals); dead holders' keys taken over after %.2f leases at most",
			skew, twice[skew], liveKeys, gaveUp[skew], takeovr[skew].Seconds()/SkewLease.Seconds()))
		if gaveUp[skew] == liveKeys {
			t.Errorf("retrier %+v leases off: every holder gave its lease up: renewals never got through, the test tested nothing", skew)
		}
		if twice[skew] > 0 {
			t.Errorf("retrier %+v leases off: %d of %d keys ran twice", skew, twice[skew], liveKeys)
		}
	}
	t.Logf("lease %v:\n%s", SkewLease, strings.Join(table, "\n"))
	for skew, e := range errs {
		t.Errorf("retrier %+v leases off: %d errors, first: %s", skew, len(e), e[0])
	}
}
