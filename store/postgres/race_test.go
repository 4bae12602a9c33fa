package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// raceConfig tells a racer process where the store is.
type raceConfig struct {
	DSN    string `json:"dsn"`
	Schema string `json:"schema"`
}

// race has 4 processes besides the test's own, each with its own pool of 8
// connections, reserve 24 keys at the same moments.
var race = storetest.ProcessRace{
	Name: "PG", Procs: 4, Goroutines: 8, Keys: 24,
	Open: func(ctx context.Context, config string) (store.Store, func(), error) {
		var c raceConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return nil, nil, err
		}
		cfg, err := pgxpool.ParseConfig(c.DSN)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = 8
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		s, err := New(pool, Options{Schema: c.Schema})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		// Open every connection before the start, so that the race is
		// between statements, not between connection set-ups.
		var conns []*pgxpool.Conn
		for range cfg.MaxConns {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			conns = append(conns, conn)
		}
		for _, conn := range conns {
			conn.Release()
		}
		return s, pool.Close, nil
	},
	Check: func(t *testing.T, s store.Store, _ string, _ []storetest.RaceResult) {
		t.Logf("reserve re-runs in this process: %d", s.(*Store).retries.Load())
	},
}

// TestMultiProcessRace has several OS processes (this test binary, re-run),
// each with several goroutines and its own pool, reserve the same keys at
// the same moments. Every key must have exactly one winner, and every loser
// must have seen the winner's token.
func TestMultiProcessRace(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	pool := testPool(t, 8)
	opts := freshSchema(t, pool)
	config, _ := json.Marshal(raceConfig{DSN: dsn, Schema: opts.Schema})
	race.Run(t, newTestStore(t, pool, opts), string(config))
}
