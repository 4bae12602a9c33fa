package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/bench/internal/contender"
	"github.com/idem-dev/idem/internal/gateway/dsn"
)

// emptyStore empties the shared store of c, if it has one, so that a run
// starts from no records whatever ran before it.
func emptyStore(ctx context.Context, s contender.Setup, c contender.Contender) error {
	if c.RedisDB != 0 {
		base := s.Redis
		if c.RedisFsync {
			base = s.RedisFsync
		}
		if base == "" {
			return fmt.Errorf("%s: no Redis with appendfsync always was started", c.ID)
		}
		if err := flushRedis(ctx, base, c.RedisDB); err != nil {
			return fmt.Errorf("flush redis db %d: %w", c.RedisDB, err)
		}
	}
	if c.Postgres {
		if err := truncatePostgres(ctx, s.Postgres); err != nil {
			return fmt.Errorf("truncate postgres: %w", err)
		}
	}
	return nil
}

// flushRedis empties Redis database db, which belongs to one contender.
func flushRedis(ctx context.Context, base string, db int) error {
	opts, err := redis.ParseURL(fmt.Sprintf("%s/%d", base, db))
	if err != nil {
		return err
	}
	c := redis.NewClient(opts)
	defer c.Close()
	return c.FlushDB(ctx).Err()
}

// truncatePostgres empties the records table of the idem DSN pg, if it
// exists yet (the gateway creates it on its first start).
func truncatePostgres(ctx context.Context, pg string) error {
	d, err := dsn.Parse(pg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	schema := d.Params["schema"]
	if schema == "" {
		schema = "public"
	}
	table := pgx.Identifier{schema, "idem_records"}.Sanitize()
	_, err = conn.Exec(ctx, "TRUNCATE TABLE "+table)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return err
}
