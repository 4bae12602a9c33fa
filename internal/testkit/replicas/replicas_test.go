package replicas_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/replicas"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestPGFailover: a row committed on a synchronous pair before the
// primary is killed is on the promoted replica, reached through the same
// virtual IP, and the pair fails over a second time.
func TestPGFailover(t *testing.T) {
	t.Parallel()
	p := replicas.StartPG(t, replicas.PGOptions{Sync: true, Delay: 5 * time.Millisecond})
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		c, err := pgx.Connect(ctx, p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		c, err := pgx.Connect(ctx, p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(`CREATE TABLE t (n int)`)
	for round := 1; round <= 2; round++ {
		exec(`INSERT INTO t VALUES ($1)`, round)
		p.Failover()
		if n := count(); n != round {
			t.Fatalf("after failover %d the new primary has %d rows; want %d", round, n, round)
		}
	}
}

// TestRedisFailover: a write that WAIT saw on the replica is on it once
// promoted, through the same virtual IP, twice.
func TestRedisFailover(t *testing.T) {
	t.Parallel()
	r := replicas.StartRedis(t, replicas.RedisOptions{Delay: 5 * time.Millisecond})
	ctx := context.Background()
	for round := 1; round <= 2; round++ {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
		if err := c.Incr(ctx, "n").Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1: %d, %v", n, err)
		}
		c.Close()
		r.Failover()
		c = redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
		n, err := c.Get(ctx, "n").Int()
		c.Close()
		if err != nil || n != round {
			t.Fatalf("after failover %d: n = %d, %v; want %d", round, n, err, round)
		}
	}
}
