package seal_test

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

	"github.com/idem-dev/idem/internal/testenv"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/storetest"
)

// The suite runs over a ring of one secret, and over a rotated ring of two,
// where every call also looks under the older secret's identities.
var rings = []struct{ name, secret string }{
	{"OneSecret", secretA},
	{"Rotated", secretB + "," + secretA},
}

func TestConformanceMemory(t *testing.T) {
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			ring := mustRing(t, r.secret)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store { return seal.Wrap(memory.New(), ring) },
			})
		})
	}
}

func TestConformancePostgres(t *testing.T) {
	pool := pgPool(t)
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			ring := mustRing(t, r.secret)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store { return seal.Wrap(pgStore(t, pool), ring) },
				Peer: func(t *testing.T, s store.Store) store.Store {
					inner := s.(*seal.Store).Unwrap().(*postgres.Store)
					peer, err := postgres.New(pgPool(t), inner.Options())
					if err != nil {
						t.Fatal(err)
					}
					return seal.Wrap(peer, ring)
				},
				Racers: 32,
			})
		})
	}
}

// pgPool connects to the test server; the pool closes when t ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgStore migrates a schema no other test uses and drops it when t ends.
func pgStore(t testing.TB, pool *pgxpool.Pool) *postgres.Store {
	t.Helper()
	opts := postgres.Options{Schema: uniqueName("idem_seal")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", opts.Schema, err)
		}
	})
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s_%d_%s", prefix, os.Getpid(), hex.EncodeToString(b))
}
