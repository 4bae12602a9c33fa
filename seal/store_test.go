package seal_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/postgres"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// The suite runs over a ring of one secret, and over a rotated ring of two,
// where every call also looks under the older secret's identities.
var rings = []struct{ name, secret string }{
	{"OneSecret", secretA},
	{"Rotated", secretB + "," + secretA},
}

func TestConformanceMemory(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	pool := pgPool(t)
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			ring := mustRing(t, r.secret)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store { return seal.Wrap(pgStore(t, pool), ring) },
				Peer: func(t *testing.T, s store.Store) store.Store {
					inner := s.(interface{ Unwrap() store.Store }).Unwrap().(*postgres.Store)
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

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	client := redisClient(t)
	ring := mustRing(t, secretA)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			prefix := uniqueName("idem-seal-conf") + ":"
			t.Cleanup(func() {
				if keys, _ := client.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
					client.Del(context.Background(), keys...)
				}
			})
			s, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return seal.Wrap(s, ring)
		},
		NativeExpiry: true,
		Racers:       32,
	})
}

func TestConformanceFile(t *testing.T) {
	t.Parallel()
	ring := mustRing(t, secretA)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, err := file.Open(t.TempDir(), file.Options{Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			return seal.Wrap(s, ring)
		},
	})
}

// A sealed response moved to another record (by someone with write access
// to the table, or a botched restore) does not open: it is never replayed
// to the wrong caller.
func TestSwappedValuesFail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgPool(t)
	inner := pgStore(t, pool)
	s := seal.Wrap(inner, mustRing(t, secretA))
	var hashes []string
	for i, v := range []string{`{"charge":"alice"}`, `{"charge":"bob"}`} {
		key := fmt.Sprintf("k%d", i)
		r := store.Record{KeyHash: store.HashKey("s", key), Scope: "s", Key: key, State: store.InProgress,
			Token: uint64(i + 1)}
		if res, err := s.Reserve(ctx, store.ReserveRequest{Record: r, Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		f := store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: r.Token}
		if err := s.Complete(ctx, store.Completion{Fence: f, State: store.Succeeded, Value: []byte(v), TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, r.KeyHash)
	}
	table := pgx.Identifier{inner.Options().Schema, inner.Options().Table}.Sanitize()
	if _, err := pool.Exec(ctx, "UPDATE "+table+" SET value = (SELECT value FROM "+table+" o WHERE o.key_hash <> "+table+".key_hash)"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hashes {
		if r, err := s.Get(ctx, "s", h); !errors.Is(err, seal.ErrCorrupt) {
			t.Fatalf("a swapped value: %q, %v; want ErrCorrupt", r.Value, err)
		}
	}
}

// pgPool connects to the test server; the pool closes when t ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return testdb.PostgresPool(t, testenv.Postgres(t), 4)
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

// redisClient is a client of the test server, closed when t ends.
func redisClient(t *testing.T) *goredis.Client {
	opts, err := goredis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	return client
}
