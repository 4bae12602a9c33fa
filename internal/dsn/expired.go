package dsn

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/store/postgres"
	redisstore "github.com/idem-dev/idem/store/redis"
)

// The stores below add CountExpired, which `idem cleanup --dry-run` looks
// for; the store packages do not offer it (yet).

// pgStore is the PostgreSQL store with a count of expired rows.
type pgStore struct {
	*postgres.Store
	pool  *pgxpool.Pool
	table string
}

// CountExpired counts the records expired at now. It walks the same
// expires_at index as Cleanup does.
func (s *pgStore) CountExpired(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table+` WHERE expires_at <= $1`, now).Scan(&n)
	return n, err
}

func pgxIdent(schema, table string) string { return pgx.Identifier{schema, table}.Sanitize() }

// redisStore is the Redis store; Redis removes expired records itself.
type redisStore struct{ *redisstore.Store }

// CountExpired is always 0: Redis drops a record the moment its TTL ends.
func (redisStore) CountExpired(context.Context, time.Time) (int, error) { return 0, nil }
