package s3store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
	"github.com/idem-dev/idem/store/storetest"
)

// raceConfig tells a racer process where the store is.
type raceConfig struct {
	Endpoint, Key, Secret, Bucket, Prefix string
}

// raceKeys is how many keys are raced; the odd ones start as stale
// records.
const raceKeys = 12

func raceKey(prefix string, k int) string { return prefix + "race-" + strconv.Itoa(k) }

// staleLease is the lease of the records the takeover race starts from:
// every racer watches them for longer than that before the race.
const staleLease = 200 * time.Millisecond

// raceRequest is racer (proc, g)'s reservation of key k.
func raceRequest(config string, proc, g, k int) store.ReserveRequest {
	var c raceConfig
	_ = json.Unmarshal([]byte(config), &c)
	key := raceKey(c.Prefix, k)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("race", key), Scope: "race", Key: key, Fingerprint: "fp", Binding: "b",
			State: store.InProgress, Token: uint64(proc)<<32 | uint64(g)<<16 | uint64(k) + 1,
		},
		Lease: time.Minute, TTL: time.Hour, TakeOverStale: true,
	}
}

// watchStale has s watch the stale records (the odd keys) for longer than
// their lease, as a racer that polled them would have: a store without a
// clock of its own takes a record over only after it has itself watched
// it unchanged for a lease.
func watchStale(ctx context.Context, s store.Store, config string) error {
	for k := 1; k < raceKeys; k += 2 {
		req := raceRequest(config, 0, 0, k)
		if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); err != nil {
			return fmt.Errorf("watch key %d: %w", k, err)
		}
	}
	time.Sleep(2 * staleLease)
	return nil
}

// race: 3 processes besides the test's own, 8 goroutines each, 12 keys of
// which the odd ones start as stale records (a takeover race).
var race = storetest.ProcessRace{
	Name: "S3", Procs: 3, Goroutines: 8, Keys: raceKeys, Interval: 150 * time.Millisecond,
	Request: raceRequest,
	Open: func(ctx context.Context, config string) (store.Store, func(), error) {
		var c raceConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return nil, nil, err
		}
		srv := &server{endpoint: c.Endpoint, key: c.Key, secret: c.Secret, bucket: c.Bucket}
		s, err := s3store.New(srv.client(nil), s3store.Options{Bucket: c.Bucket, Prefix: c.Prefix})
		if err != nil {
			return nil, nil, err
		}
		if err := watchStale(ctx, s, config); err != nil {
			return nil, nil, err
		}
		return s, transport.CloseIdleConnections, nil
	},
	Check: func(t *testing.T, _ store.Store, _ string, results []storetest.RaceResult) {
		for _, r := range results {
			if stale := r.Key%2 == 1; r.Acquired && r.TookOver != stale {
				t.Errorf("key %d: the winner's TookOver is %v, want %v", r.Key, r.TookOver, stale)
			}
		}
	},
}

// TestMultiProcessRace has several OS processes (this test binary, re-run),
// each with its own S3 client and several goroutines, reserve the same keys
// at the same moments: fresh keys (a create race) and stale records (a
// takeover race). Nothing but the server's conditional writes coordinates
// them. Every key must have exactly one winner, and every loser must have
// seen the winner's token.
func TestMultiProcessRace(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	s := newStore(t, srv, nil)
	cfg, _ := json.Marshal(raceConfig{Endpoint: srv.endpoint, Key: srv.key, Secret: srv.secret, Bucket: srv.bucket, Prefix: s.Options().Prefix})
	for k := 1; k < raceKeys; k += 2 { // the stale records
		req := raceRequest(string(cfg), 99, 0, k)
		req.Lease = staleLease
		mustAcquire(t, s, req)
	}
	// This process races too, through s.
	if err := watchStale(context.Background(), s, string(cfg)); err != nil {
		t.Fatal(err)
	}
	race.Run(t, s, string(cfg))
}
