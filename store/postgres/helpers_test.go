package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	race.Child() // a re-executed test binary is a racer of TestMultiProcessRace
	testkit.VerifyTestMain(m)
}

// testPool connects to the test server with at most maxConns connections;
// the pool is closed when t ends.
func testPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return openPool(t, testenv.Postgres(t), maxConns)
}

func openPool(t testing.TB, dsn string, maxConns int32, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return testdb.PostgresPool(t, dsn, maxConns, configure...)
}

// uniqueName returns a schema name no other test run uses.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s_%d_%s", prefix, os.Getpid(), hex.EncodeToString(b))
}

// freshSchema migrates a new schema of its own and drops it when t ends.
func freshSchema(t testing.TB, pool *pgxpool.Pool) Options {
	t.Helper()
	opts := Options{Schema: uniqueName("idem_test")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { dropSchema(t, pool, opts.Schema) })
	if err := Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return opts
}

func dropSchema(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

func newTestStore(t testing.TB, pool *pgxpool.Pool, opts Options) *Store {
	t.Helper()
	s, err := New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// indexKeys lists the primary key of s's table as hex strings.
func indexKeys(t testing.TB, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT encode(key_hash, 'hex') FROM `+s.opts.qualified())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// freshStore is a store over a schema of its own, on a pool of 2.
func freshStore(t *testing.T) *Store {
	t.Helper()
	pool := testPool(t, 2)
	return newTestStore(t, pool, freshSchema(t, pool))
}
