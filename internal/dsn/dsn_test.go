package dsn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idem-dev/idem/internal/testenv"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMainAfter(m, func() {
		// rueidis's cluster client, once closed, has each closed
		// connection's hook start a topology refresh after a random delay
		// of up to a second, which then finds the client stopped and
		// ends. Wait that out rather than ignore the goroutine: whatever
		// still runs two seconds after the tests is a leak.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			if goleak.Find() == nil {
				return
			}
		}
	})
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in              string
		kind, path, url string
		params          string
		err             string
	}{
		{in: "memory:", kind: Memory},
		{in: "memory", kind: Memory},
		{in: "memory://", kind: Memory},
		{in: "memory:/x", err: "memory takes no path"},
		{in: "file:./idem-data", kind: File, path: "./idem-data"},
		{in: "file:/var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "file:///var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "file://host/x", err: "a file store is local"},
		{in: "file:", err: "file needs a directory"},
		{in: "pebble:./idem-data", kind: Pebble, path: "./idem-data"},
		{in: "pebble:", err: "pebble needs a directory"},
		{in: "postgres://u:pw@h:5432/db?sslmode=disable&idem_schema=s&idem_table=t", kind: Postgres,
			url: "postgres://u:pw@h:5432/db?sslmode=disable", params: "schema=s,table=t"},
		{in: "postgresql://h/db", kind: Postgres, url: "postgresql://h/db"},
		{in: "postgres://h/db?idem_prefix=x", err: "unknown parameter idem_prefix"},
		{in: "redis://127.0.0.1:6379/2?idem_prefix=app:", kind: Redis, url: "redis://127.0.0.1:6379/2", params: "prefix=app:"},
		{in: "rediss://h:6380", kind: Redis, url: "rediss://h:6380"},
		{in: "s3://bucket/prefix?endpoint=http://127.0.0.1:7070", kind: S3, url: "s3://bucket/prefix?endpoint=http://127.0.0.1:7070"},
		{in: "s3://", err: "bucket"},
		{in: "./idem-data", err: "unknown store DSN"},
		{in: "mysql://u:secret@h/db", err: "unknown store DSN"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := Parse(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse error = %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ps []string
			for _, k := range []string{"prefix", "schema", "table"} {
				if v, ok := d.Params[k]; ok {
					ps = append(ps, k+"="+v)
				}
			}
			if d.Kind != tc.kind || d.Path != tc.path || d.URL != tc.url || strings.Join(ps, ",") != tc.params {
				t.Errorf("Parse = %+v", d)
			}
		})
	}
	if _, err := Parse("ftp://x"); !errors.Is(err, ErrUnknownScheme) {
		t.Errorf("error %v does not match ErrUnknownScheme", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	d, err := Parse("postgres://user:hunter2@h/db")
	if err != nil {
		t.Fatal(err)
	}
	if s := d.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "user") {
		t.Errorf("String = %q", s)
	}
}

// roundTrip reserves, completes and reads back a record.
func roundTrip(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	kh := store.HashKey("dsn-test", fmt.Sprint(rand.Uint64()))
	rec := store.Record{KeyHash: kh, Scope: "dsn-test", Key: "k", State: store.InProgress, Token: 7}
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Acquired {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	f := store.Fence{KeyHash: kh, Scope: "dsn-test", Token: 7}
	if err := s.Complete(ctx, store.Completion{Fence: f, State: store.Succeeded, Value: []byte("v"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "dsn-test", kh)
	if err != nil || string(got.Value) != "v" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

type counter interface {
	CountExpired(context.Context) (int, error)
}

func TestOpenMemoryAndFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := Open(ctx, "memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "data")
	f, err := Open(ctx, "file:"+dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, f)
	// A second opener gets a message that says what to do.
	if _, err := Open(ctx, "file:"+dir, Options{}); err == nil || !strings.Contains(err.Error(), "work through the gateway instead (--admin") {
		t.Errorf("second Open = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres(t)
	ctx := context.Background()
	schema := fmt.Sprintf("idem_dsn_test_%d", rand.Uint32())
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	dsn := base + sep + "idem_schema=" + schema
	t.Cleanup(func() {
		pool, err := pgxpool.New(ctx, base)
		if err == nil {
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			pool.Close()
		}
	})

	o, err := Open(ctx, dsn, Options{})
	if err != nil {
		// Without migrations the table does not exist; Open itself runs no
		// query on it, so this must not fail.
		t.Fatalf("Open without migrate: %v", err)
	}
	o.Close()
	rep, err := Migrate(ctx, dsn)
	if err != nil || rep.Version < 1 || len(rep.Applied) == 0 || rep.Recreated {
		t.Fatalf("Migrate = %+v, %v", rep, err)
	}
	o, err = Open(ctx, dsn, Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	roundTrip(t, o)
	c, ok := o.Store.(counter)
	if !ok {
		t.Fatal("postgres store has no CountExpired")
	}
	gone := store.Record{KeyHash: store.HashKey("dsn-test", fmt.Sprint(rand.Uint64())), Scope: "dsn-test", Key: "gone", State: store.InProgress, Token: 8}
	if _, err := o.Store.Reserve(ctx, store.ReserveRequest{Record: gone, Lease: time.Millisecond, TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // its lifetime has passed on the server's clock
	if n, err := c.CountExpired(ctx); err != nil || n != 1 {
		t.Errorf("CountExpired = %d, %v; want 1", n, err)
	}
	if _, err := Migrate(ctx, "memory:"); !errors.Is(err, ErrNotPostgres) {
		t.Errorf("Migrate(memory:) = %v", err)
	}
}

// TestMigrateChecksTheTable: migrate looks at what is in the database, not
// only at its own bookkeeping. A dropped records table (which `idem
// migrate` used to report as "schema at version 1" while every request
// failed) is created again; a table missing a column is an error.
func TestMigrateChecksTheTable(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres(t)
	ctx := context.Background()
	schema := fmt.Sprintf("idem_dsn_drop_%d", rand.Uint32())
	dsn := base + "&idem_schema=" + schema
	if !strings.Contains(base, "?") {
		dsn = base + "?idem_schema=" + schema
	}
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })

	if rep, err := Migrate(ctx, dsn); err != nil || len(rep.Applied) != postgres.SchemaVersion() {
		t.Fatalf("first migrate: %+v %v", rep, err)
	}
	if rep, err := Migrate(ctx, dsn); err != nil || len(rep.Applied) != 0 || rep.Recreated {
		t.Fatalf("second migrate: %+v %v", rep, err)
	}
	if _, err := pool.Exec(ctx, "DROP TABLE "+schema+".idem_records"); err != nil {
		t.Fatal(err)
	}
	rep, err := Migrate(ctx, dsn)
	if err != nil || !rep.Recreated || len(rep.Applied) != postgres.SchemaVersion() {
		t.Fatalf("migrate after DROP TABLE: %+v %v", rep, err)
	}
	o, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, o)
	o.Close()

	if _, err := pool.Exec(ctx, "ALTER TABLE "+schema+".idem_records DROP COLUMN binding"); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, dsn); err == nil || !strings.Contains(err.Error(), "lacks the columns binding") {
		t.Errorf("migrate of a table without binding: %v", err)
	}
}

// TestOpenRedisCluster: a redis-cluster:// DSN opens the store on a real
// 3-node cluster (started by scripts/redis-cluster.sh) and spreads
// records over its primaries.
func TestOpenRedisCluster(t *testing.T) {
	t.Parallel()
	dsn := testenv.RedisCluster(t)
	o, err := Open(context.Background(), dsn+"&idem_prefix=idem-dsn-cluster:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.DSN.Kind != RedisCluster {
		t.Errorf("kind %q", o.DSN.Kind)
	}
	roundTrip(t, o)
	// Not a cluster: a plain Redis behind redis-cluster:// is refused
	// with the reason.
	plain := strings.Replace(testenv.Redis(t), "redis://", "redis-cluster://", 1)
	if _, err := Open(context.Background(), plain, Options{}); err == nil || !strings.Contains(err.Error(), "cannot connect") {
		t.Errorf("redis-cluster:// on a plain Redis: %v", err)
	}
}

func TestOpenRedis(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	o, err := Open(context.Background(), url+"?idem_prefix=idem-dsn-test:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	roundTrip(t, o)
	// The pipelining knobs: each value opens a working store, and a bad
	// one is refused with the parameter's name.
	for _, q := range []string{"idem_flush_delay=0", "idem_flush_delay=250us&idem_connections=4", "idem_connections=1"} {
		o, err := Open(context.Background(), url+"?idem_prefix=idem-dsn-test:&"+q, Options{})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		roundTrip(t, o)
		o.Close()
	}
	for q, want := range map[string]string{
		"idem_flush_delay=soon": "idem_flush_delay", "idem_flush_delay=-1ms": "idem_flush_delay", "idem_flush_delay=2s": "idem_flush_delay",
		"idem_connections=3": "idem_connections", "idem_connections=0": "idem_connections", "idem_connections=512": "idem_connections",
	} {
		if _, err := Open(context.Background(), url+"?"+q, Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", q, err, want)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, dsn := range []string{"postgres://postgres@127.0.0.1:1/x?connect_timeout=1", "redis://127.0.0.1:1/0"} {
		if _, err := Open(ctx, dsn, Options{ConnectTimeout: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "cannot connect") {
			t.Errorf("Open(%s) = %v, want cannot connect", dsn, err)
		}
	}
}
