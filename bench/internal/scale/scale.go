// Package scale measures idem's stores directly, without HTTP: how the
// latency of a reservation changes as the number of live keys grows, and
// how long cleanup takes as the number of expired keys grows.
package scale

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/idem-dev/idem/bench/internal/results"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/store"
)

// Options configures Run.
type Options struct {
	// Mode is "quick" (10^4 live keys), "default" (10^4 and 10^6) or
	// "full" (adds 10^7 on PostgreSQL).
	Mode string
	// Dir holds the embedded store.
	Dir string
	// Postgres is an idem DSN whose schema the run drops and recreates.
	Postgres string
	// Redis is a Redis URL with a database number the run flushes.
	Redis string
	// Samples is the number of timed calls per measurement; 0 means 5000.
	Samples int
	// Stores, when not empty, lists the stores to measure (file,
	// postgres, redis).
	Stores []string
}

// Expired are the numbers of expired records each cleanup measurement
// adds before it runs Cleanup.
var Expired = []int{1_000, 10_000, 100_000}

// Run measures the file, PostgreSQL and Redis stores and adds the results
// to doc.
func Run(ctx context.Context, opts Options, doc *results.Doc) error {
	if opts.Samples <= 0 {
		opts.Samples = 5000
	}
	levels := []int{10_000, 1_000_000}
	if opts.Mode == "quick" {
		levels = levels[:1]
	}
	pgLevels := levels
	if opts.Mode == "full" {
		pgLevels = append(append([]int(nil), levels...), 10_000_000)
	}
	if err := os.RemoveAll(opts.Dir); err != nil {
		return err
	}
	defer os.RemoveAll(opts.Dir)
	targets := []struct {
		name   string
		levels []int
		open   func(context.Context) (*dsn.Opened, loader, error)
	}{
		{"file", levels, func(ctx context.Context) (*dsn.Opened, loader, error) { return openFile(ctx, opts.Dir) }},
		{"postgres", pgLevels, func(ctx context.Context) (*dsn.Opened, loader, error) { return openPostgres(ctx, opts.Postgres) }},
		{"redis", levels, func(ctx context.Context) (*dsn.Opened, loader, error) { return openRedis(ctx, opts.Redis) }},
	}
	for _, t := range targets {
		if len(opts.Stores) > 0 && !slices.Contains(opts.Stores, t.name) {
			continue
		}
		if err := runStore(ctx, opts, t.name, t.levels, t.open, doc); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}

func runStore(ctx context.Context, opts Options, name string, levels []int,
	open func(context.Context) (*dsn.Opened, loader, error), doc *results.Doc) error {
	st, ld, err := open(ctx)
	if err != nil {
		return err
	}
	// The store closes first: the loader may then drop what it loaded.
	defer ld.close()
	defer st.Close()
	live := 0
	for _, level := range levels {
		log.Printf("scale: %s: loading %d live keys", name, level)
		start := time.Now()
		if err := ld.live(ctx, live, level); err != nil {
			return fmt.Errorf("loading %d live keys: %w", level, err)
		}
		loadSecs := time.Since(start).Seconds()
		live = level
		for _, op := range []string{OpReserveNew, OpReserveExisting} {
			lat, err := measureReserve(ctx, st, op, opts.Samples, level)
			if err != nil {
				return fmt.Errorf("%s at %d keys: %w", op, level, err)
			}
			lat.Store, lat.LiveKeys, lat.LoadSeconds = name, level, loadSecs
			log.Printf("scale: %s %-20s %9d keys: p50 %.3f ms p99 %.3f ms p99.9 %.3f ms", name, op, level, lat.P50, lat.P99, lat.P999)
			doc.Scale = append(doc.Scale, lat)
		}
		// Cleanup at the first and last levels: its cost should follow the
		// expired records, whatever the number of live ones.
		if level != levels[0] && level != levels[len(levels)-1] {
			continue
		}
		expired := Expired
		if name == "redis" {
			expired = []int{0} // nothing to add: see measureCleanup
		}
		for _, n := range expired {
			c, err := measureCleanup(ctx, st, ld, name, level, n)
			if err != nil {
				return fmt.Errorf("cleanup of %d among %d: %w", n, level, err)
			}
			log.Printf("scale: %s cleanup %7d expired among %9d live: %d deleted in %.3f s", name, n, level, c.Deleted, c.Seconds)
			doc.Cleanup = append(doc.Cleanup, c)
		}
	}
	return nil
}

// measureCleanup adds n expired records and times one Cleanup call.
func measureCleanup(ctx context.Context, st store.Store, ld loader, name string, live, n int) (results.Cleanup, error) {
	c := results.Cleanup{Store: name, LiveKeys: live, Expired: n}
	if name == "redis" {
		// Redis drops expired records itself (each key has a TTL): there
		// is nothing to load and Cleanup has nothing to do.
		c.Note = "native TTL: Redis expires records itself"
	} else if err := ld.expired(ctx, n); err != nil {
		return c, err
	}
	start := time.Now()
	deleted, err := st.Cleanup(ctx, 0)
	c.Seconds, c.Deleted = time.Since(start).Seconds(), deleted
	if err != nil {
		return c, err
	}
	if name != "redis" && deleted != n {
		return c, fmt.Errorf("deleted %d of %d expired records", deleted, n)
	}
	return c, nil
}
