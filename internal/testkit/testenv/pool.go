package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresPool connects to the server at dsn (Postgres(t) for the test
// server) with at most maxConns connections, configured further by
// configure; the pool is closed when t ends.
func PostgresPool(t testing.TB, dsn string, maxConns int32, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	for _, f := range configure {
		f(cfg)
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PostgresExample readies the test server for an example that reads its
// DSN from DATABASE_URL and writes in schema: it sets DATABASE_URL for t,
// and drops schema now and when t ends.
func PostgresExample(t *testing.T, schema string) {
	t.Helper()
	dsn := Postgres(t)
	t.Setenv("DATABASE_URL", dsn)
	pool := PostgresPool(t, dsn, 2)
	drop := func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	}
	drop()
	t.Cleanup(drop)
}
