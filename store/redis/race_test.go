package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// raceConfig tells a racer process where the store is.
type raceConfig struct {
	URL    string `json:"url"`
	Prefix string `json:"prefix"`
}

// race has 3 processes besides the test's own, 8 goroutines each, reserve
// 64 keys, a new key every 20 ms.
var race = storetest.ProcessRace{
	Name: "REDIS", Procs: 3, Goroutines: 8, Keys: 64, Interval: 20 * time.Millisecond,
	Open: func(ctx context.Context, config string) (store.Store, func(), error) {
		var c raceConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return nil, nil, err
		}
		opt, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, nil, err
		}
		opt.ContextTimeoutEnabled = true
		client := redis.NewClient(opt)
		s, err := redisstore.New(client, redisstore.Options{Prefix: c.Prefix})
		if err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		// Open the pool's connections before the start, so that the race
		// is not decided by who dials first.
		if _, err := s.Get(ctx, "race", store.HashKey("race", "warm-up")); err != nil && !errors.Is(err, store.ErrNotFound) {
			_ = client.Close()
			return nil, nil, err
		}
		return s, func() { _ = s.Close(); _ = client.Close() }, nil
	},
}

// TestMultiProcessRace has several OS processes, each with several
// goroutines and its own connection pool, reserve the same keys at the same
// moment: every key must have exactly one winner, whose token is the one
// stored and the one every loser saw.
func TestMultiProcessRace(t *testing.T) {
	client := newClient(t, nil)
	s, prefix := newStore(t, client)
	config, _ := json.Marshal(raceConfig{URL: testenv.Redis(t), Prefix: prefix})
	race.Run(t, s, string(config))
}
