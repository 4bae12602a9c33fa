package storetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// EngineClockSkew runs two replicas, engines over a holder's and a
// retrier's store client of their own, whose clocks are 0, 0.5, 2 and 10
// leases apart in both directions. For 20 keys per offset one holds the
// key and works 2.5 leases, renewing on time, while the other retries the
// key every quarter lease: no live holder is taken over (SkewScenario,
// which counts apart the holders that gave their lease up for slow
// renewals). Then 5 holders per offset, each on a client of its own that
// dying makes, die half a lease into their work (kill closes their
// client: not another write), and the other replica, retrying every
// quarter lease, takes each key over on its first try that begins a
// lease after its first look ended (TakeOverDead; within two leases of
// the death on a quiet machine; the table logs how long it took).
//
// It is for stores whose replicas share a backend over the network, each
// with clients of its own (store/postgres, store/redis).
func EngineClockSkew(t *testing.T, holder, retrier store.Store, dying func(t *testing.T) (s store.Store, kill func())) {
	quiet := idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	SkewScenario{Holder: holder, Retrier: retrier, Keys: 20, Rounds: 3, Options: []idem.Option{quiet}}.Run(t)
	deadHolders(t, retrier, dying, quiet)
}

// deadHolderKeys is how many holders die at each offset in EngineClockSkew.
const deadHolderKeys = 5

// deadHolders is EngineClockSkew's second half: at each offset, holders
// on a client that dying makes die half a lease into their work, and an
// engine over retrier takes each key over (TakeOverDead).
func deadHolders(t *testing.T, retrier store.Store, dying func(t *testing.T) (store.Store, func()), opts ...idem.Option) {
	p := idem.Policy{Lease: SkewLease, TTL: time.Hour, CleanupInterval: -1}
	engine := func(s store.Store, skew float64) *idem.Engine {
		return idem.New(s, p, append([]idem.Option{idem.WithClock(Skewed(skew))}, opts...)...)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		worst = map[float64]time.Duration{}
	)
	for _, skew := range Skews {
		s, kill := dying(t)
		wg.Go(func() {
			d, r := engine(s, 0), engine(retrier, skew)
			defer r.Close()
			defer d.Close()
			took, errs := killHolders(d, r, kill, skew)
			mu.Lock()
			worst[skew] = took
			mu.Unlock()
			for _, err := range errs {
				t.Errorf("retrier %+v leases off: dead holder's key: %v", skew, err)
			}
		})
	}
	wg.Wait()
	var table []string
	for _, skew := range Skews {
		table = append(table, fmt.Sprintf("retrier %+5.1f leases: dead holders' keys taken over after %.2f leases at most", skew, worst[skew].Seconds()/SkewLease.Seconds()))
	}
	t.Logf("lease %v:\n%s", SkewLease, strings.Join(table, "\n"))
}

// killHolders starts deadHolderKeys keys on d, kills d's client half a
// lease into their work, and takes each key over on r. It returns the
// longest a takeover took after the kill, and what went wrong.
func killHolders(d, r *idem.Engine, kill func(), skew float64) (time.Duration, []error) {
	killed := make(chan struct{})
	var holders sync.WaitGroup
	defer holders.Wait()
	calls := make([]idem.Call, deadHolderKeys)
	for k := range calls {
		calls[k] = idem.Call{Scope: "test", Key: fmt.Sprintf("skew-dead-%d-%v-%d", newToken(), skew, k), Fingerprint: "fp"}
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
	var (
		mu    sync.Mutex
		worst time.Duration
		errs  []error
		wg    sync.WaitGroup
	)
	for _, call := range calls {
		wg.Go(func() {
			err := TakeOverDead(r, call)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			worst = max(worst, time.Since(died))
		})
	}
	wg.Wait()
	return worst, errs
}
