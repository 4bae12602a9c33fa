package s3store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
	"github.com/idem-dev/idem/store/storetest"
)

// skewKeys is how many keys each skew runs at once.
const skewKeys = 16

// keySeq makes the tests' keys unique.
var keySeq atomic.Int64

// skewStores returns two clients of one prefix on the real server, each
// with a connection pool of its own, as two replicas would have.
func skewStores(t *testing.T) (a, b *s3store.Store) {
	t.Helper()
	srv := realServer(t)
	a = newStore(t, srv, nil)
	return a, sibling(t, a, srv.peerClient())
}

// TestEngineClockSkew: two replicas, each an engine over its own S3
// client, whose clocks are 0 to 10 leases apart in both directions. For
// each of skewKeys keys at once, one replica holds the key and works 2.5
// leases, renewing as the engine does; the other retries every quarter
// lease until it gets the outcome (storetest.SkewScenario). No live
// holder may be taken over: the
// S3 store never compares the replicas' clocks (leases by observe and
// wait, expiry by the server's Date).
//
// A holder whose renewals do not get through in time (a loaded machine)
// gives its lease up by its own count, and its work's context is
// canceled, before any other replica can judge the lease over; the key
// may then run again. That is counted apart. What must never happen is a
// second run starting while the first one's context is still live.
//
// It runs alone (not in parallel with the package's other tests), so
// that the holders' renewals are not starved by the rest.
func TestEngineClockSkew(t *testing.T) {
	a, b := skewStores(t)
	storetest.SkewScenario{Holder: a, Retrier: b, Keys: skewKeys, Rounds: 3, WantInProgress: true, Serial: true}.Run(t)
}

// TestEngineDeadHolderSkew: a holder reserves skewKeys keys and dies (it
// never renews); the other replica, whose clock is 0 to 10 leases off,
// retries each every quarter lease. It takes each key over no sooner than
// a lease after the reservation, and on its first try that begins a lease
// after its first look ended (within two leases of the reservation on a
// quiet machine; the log says how long it took).
func TestEngineDeadHolderSkew(t *testing.T) {
	a, b := skewStores(t)
	p := idem.Policy{Lease: storetest.SkewLease, TTL: time.Hour, CleanupInterval: -1}
	for _, skew := range storetest.Skews {
		t.Run(fmt.Sprintf("%+g_leases", skew), func(t *testing.T) {
			retrier := idem.New(b, p, idem.WithClock(storetest.Skewed(skew)))
			defer retrier.Close()
			var (
				wg         sync.WaitGroup
				mu         sync.Mutex
				fast, slow time.Duration
			)
			for k := range skewKeys {
				wg.Go(func() {
					call := idem.Call{Scope: "skew", Key: fmt.Sprintf("%s-%d-%d", t.Name(), k, keySeq.Add(1)), Fingerprint: "fp"}
					dead := store.ReserveRequest{
						Record: store.Record{KeyHash: store.HashKey(call.Scope, call.Key), Scope: call.Scope, Key: call.Key,
							Fingerprint: call.Fingerprint, State: store.InProgress, Token: uint64(keySeq.Add(1)) << 8, RequestID: "dead"},
						Lease: storetest.SkewLease, TTL: time.Hour,
					}
					sent := time.Now()
					if res, err := a.Reserve(context.Background(), dead); err != nil || !res.Acquired {
						t.Errorf("key %d: the dead holder's reservation: %+v, %v", k, res, err)
						return
					}
					err := storetest.TakeOverDead(retrier, call)
					took := time.Since(sent)
					switch {
					case err != nil:
						t.Errorf("key %d: %v", k, err)
						return
					case took < storetest.SkewLease:
						t.Errorf("key %d: taken over %v after the reservation, before its lease of %v", k, took, storetest.SkewLease)
					}
					mu.Lock()
					if fast == 0 || took < fast {
						fast = took
					}
					slow = max(slow, took)
					mu.Unlock()
				})
			}
			wg.Wait()
			t.Logf("retrier %+g leases off: %d dead holders' keys taken over %v to %v after their reservation (lease %v)",
				skew, skewKeys, fast.Round(time.Millisecond), slow.Round(time.Millisecond), storetest.SkewLease)
		})
	}
}
