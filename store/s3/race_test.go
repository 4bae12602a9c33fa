package s3store_test

import (
	"context"
	"encoding/json"
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

func raceKey(prefix string, k int) string { return prefix + "race-" + strconv.Itoa(k) }

// raceRequest is racer (proc, g)'s reservation of key k, five minutes
// after the stale records' reservation.
func raceRequest(config string, proc, g, k int) store.ReserveRequest {
	var c raceConfig
	_ = json.Unmarshal([]byte(config), &c)
	now := t0.Add(5 * time.Minute)
	key := raceKey(c.Prefix, k)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("race", key), Scope: "race", Key: key, Fingerprint: "fp", Binding: "b",
			State: store.InProgress, Token: uint64(proc)<<32 | uint64(g)<<16 | uint64(k) + 1,
			CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour), LeaseUntil: now.Add(time.Minute),
		},
		Now:           now,
		TakeOverStale: true,
	}
}

// race: 3 processes besides the test's own, 8 goroutines each, 12 keys of
// which the odd ones start as stale records (a takeover race).
var race = storetest.ProcessRace{
	Name: "S3", Procs: 3, Goroutines: 8, Keys: 12, Interval: 150 * time.Millisecond,
	Request: raceRequest,
	Open: func(_ context.Context, config string) (store.Store, func(), error) {
		var c raceConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return nil, nil, err
		}
		srv := &server{endpoint: c.Endpoint, key: c.Key, secret: c.Secret, bucket: c.Bucket}
		s, err := s3store.New(srv.client(nil), s3store.Options{Bucket: c.Bucket, Prefix: c.Prefix})
		if err != nil {
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
	for k := 1; k < race.Keys; k += 2 { // the stale records
		req := raceRequest(string(cfg), 99, 0, k)
		req.Now = t0
		req.Record.LeaseUntil = t0.Add(time.Minute)
		req.Record.ExpiresAt = t0.Add(time.Hour)
		mustAcquire(t, s, req)
	}
	race.Run(t, s, string(cfg))
}
