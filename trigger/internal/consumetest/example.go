package consumetest

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/store/postgres"
)

// OpenStore is the adapters' examples' set-up: it connects to the
// service's PostgreSQL database (DATABASE_URL) and returns its pool and
// idem's store in it, migrated. It exits the process on an error, as an
// example's main would.
func OpenStore(ctx context.Context) (*pgxpool.Pool, *postgres.Store) {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool, postgres.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return pool, store
}
