package s3store_test

import (
	"context"
	"errors"
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
// lease until it gets the outcome. No live holder may be taken over: the
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
	p := idem.Policy{Lease: storetest.SkewLease, TTL: time.Hour, CleanupInterval: -1}
	twice := map[float64]int{}
	for _, skew := range storetest.Skews {
		t.Run(fmt.Sprintf("%+g_leases", skew), func(t *testing.T) {
			holder := idem.New(a, p, idem.WithClock(storetest.Skewed(0)))
			retrier := idem.New(b, p, idem.WithClock(storetest.Skewed(skew)))
			defer holder.Close()
			defer retrier.Close()
			var (
				wg        sync.WaitGroup
				ranTwice  atomic.Int32 // a live holder taken over
				reran     atomic.Int32 // run again after the holder gave up
				conflicts atomic.Int32
				gaveUp    atomic.Int32
			)
			for k := range skewKeys {
				wg.Go(func() {
					call := idem.Call{Scope: "skew", Key: fmt.Sprintf("%s-%d-%d", t.Name(), k, keySeq.Add(1)), Fingerprint: "fp"}
					var (
						runs    atomic.Int32
						tracker storetest.SkewTracker
						gave    bool // the holder gave its lease up
					)
					started := make(chan struct{})
					work := tracker.Work(&runs, started)
					// Judged however the key ends: a holder whose key was
					// taken over returns an error.
					defer func() {
						switch n := runs.Load(); {
						case tracker.Overlaps() > 0:
							ranTwice.Add(1)
							t.Errorf("key %d: a second run started while an earlier one was live", k)
						case n > 1 && gave:
							reran.Add(1)
						case n > 1:
							ranTwice.Add(1)
							t.Errorf("key %d: the work ran %d times", k, n)
						}
					}()
					held := make(chan error, 1)
					go func() {
						_, err := holder.Do(context.Background(), call, work)
						held <- err
					}()
					<-started
					replayed, seen := false, 0
					for holderDone := false; !holderDone || !replayed; {
						select {
						case err := <-held:
							if errors.Is(err, idem.ErrLeaseLost) {
								// Its renewals did not get through in time,
								// and it gave its lease up by its own count.
								gaveUp.Add(1)
								gave = true
								return
							}
							if err != nil {
								t.Errorf("key %d: the holder: %v", k, err)
								return
							}
							holderDone = true
						case <-time.After(storetest.SkewLease / 4):
						}
						res, err := retrier.Do(context.Background(), call, work)
						switch {
						case errors.Is(err, idem.ErrInProgress):
							seen++
						case err != nil:
							t.Errorf("key %d: a retry: %v", k, err)
							return
						case res.Replayed && string(res.Value) == "done":
							replayed = true
						}
					}
					conflicts.Add(int32(seen))
					if seen == 0 {
						t.Errorf("key %d: no retry saw the key in progress", k)
					}
				})
			}
			wg.Wait()
			twice[skew] = int(ranTwice.Load())
			t.Logf("retrier %+g leases off: %d of %d keys ran twice (a live holder taken over); %d retries answered in progress; "+
				"%d holders gave their lease up (renewals too slow), %d of their keys ran again after",
				skew, ranTwice.Load(), skewKeys, conflicts.Load(), gaveUp.Load(), reran.Load())
		})
	}
	t.Logf("keys run twice per skew in leases (of %d each): %v", skewKeys, twice)
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
					var firstLook time.Time
					for {
						try := time.Now()
						res, err := retrier.Do(context.Background(), call, func(context.Context) ([]byte, error) { return []byte("taken"), nil })
						took := time.Since(sent)
						if firstLook.IsZero() {
							firstLook = time.Now()
						}
						if errors.Is(err, idem.ErrInProgress) {
							if storetest.TakeoverOverdue(firstLook, try) {
								t.Errorf("key %d: still in progress on a try %v after the first look ended, more than a lease",
									k, try.Sub(firstLook).Round(time.Millisecond))
								return
							}
							if took > 30*storetest.SkewLease {
								t.Errorf("key %d: the dead holder's key still held after %v", k, took)
								return
							}
							time.Sleep(storetest.SkewLease / 4)
							continue
						}
						switch {
						case err != nil || !res.TookOver:
							t.Errorf("key %d: %+v, %v; want a takeover", k, res, err)
						case took < storetest.SkewLease:
							t.Errorf("key %d: taken over %v after the reservation, before its lease of %v", k, took, storetest.SkewLease)
						}
						mu.Lock()
						if fast == 0 || took < fast {
							fast = took
						}
						slow = max(slow, took)
						mu.Unlock()
						return
					}
				})
			}
			wg.Wait()
			t.Logf("retrier %+g leases off: %d dead holders' keys taken over %v to %v after their reservation (lease %v)",
				skew, skewKeys, fast.Round(time.Millisecond), slow.Round(time.Millisecond), storetest.SkewLease)
		})
	}
}
