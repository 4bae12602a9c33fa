package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// EarlierHolders checks how a store judges the in-progress records that
// replicas of its earlier version wrote on their own clocks, during a
// rolling upgrade. Before it runs, the earlier version holds "renewing"
// (token 101) on a clock 10 leases behind, renewed by renew, and holds
// "dead-ahead" on a clock 10 leases ahead, and "taken-by-earlier" on one
// two minutes ahead, both dead. retry is this version's reservation of
// key with token, with the lease the earlier replicas have (the one the
// route's policy gives every replica).
//
// A holder that renews, however far behind its clock, is never taken
// over, and once it dies its key is taken over within two leases of its
// last renewal; a dead holder's key is taken over within two leases of the
// first look, however far ahead its clock. Judged on one clock by their
// lease's end, the first would be taken over at once and the others only
// after 10 leases or more. Each runs as a parallel subtest.
func EarlierHolders(t *testing.T, s store.Store, lease time.Duration, retry func(key string, token uint64) store.ReserveRequest, renew func(t testing.TB, key string, token uint64) bool) {
	ctx := context.Background()
	// takeOver retries the key every quarter lease until this version
	// takes it over, and returns how long after since that took.
	takeOver := func(t *testing.T, key string, token uint64, since time.Time) time.Duration {
		t.Helper()
		for {
			res, err := s.Reserve(ctx, retry(key, token))
			if err != nil {
				t.Fatal(err)
			}
			if res.Acquired {
				if !res.TookOver {
					t.Fatalf("%s: acquired without a takeover", key)
				}
				return time.Since(since)
			}
			if res.Existing.State != store.InProgress || res.Existing.LeaseLeft > lease {
				t.Fatalf("%s: existing %+v", key, res.Existing)
			}
			if time.Since(since) > 20*lease {
				t.Fatalf("%s: not taken over %v after its holder died", key, time.Since(since))
			}
			time.Sleep(lease / 4)
		}
	}

	t.Run("renewing holder 10 leases behind", func(t *testing.T) {
		t.Parallel()
		// The holder renews every other look, half a lease apart; the
		// retries in between see its record unchanged for a quarter lease.
		for i := range 12 {
			if i%2 == 0 && !renew(t, "renewing", 101) {
				t.Fatal("the holder lost its lease")
			}
			res, err := s.Reserve(ctx, retry("renewing", uint64(400+i)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Acquired {
				t.Fatalf("look %d: a live holder 10 leases behind was taken over", i)
			}
			if ex := res.Existing; ex.Token != 101 || ex.LeaseLeft <= 0 || ex.LeaseLeft > lease || ex.LeaseUntil.Sub(ex.ReadAt) != ex.LeaseLeft {
				t.Fatalf("look %d: existing token %d, lease left %v, until %v read at %v", i, ex.Token, ex.LeaseLeft, ex.LeaseUntil, ex.ReadAt)
			}
			time.Sleep(lease / 4)
		}
		// It dies after one last renewal.
		renew(t, "renewing", 101)
		took := takeOver(t, "renewing", 500, time.Now())
		t.Logf("taken over %v after its holder's last renewal (lease %v)", took, lease)
		if took > 3*lease {
			t.Errorf("taken over %v after its holder died, want within two leases", took)
		}
		if renew(t, "renewing", 101) {
			t.Error("the earlier holder renewed after the takeover")
		}
	})

	for _, key := range []string{"dead-ahead", "taken-by-earlier"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			took := takeOver(t, key, 600, time.Now())
			t.Logf("taken over %v after the first look (lease %v)", took, lease)
			if took > 3*lease {
				t.Errorf("taken over %v after the first look, want within two leases", took)
			}
		})
	}
}
