package dsn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
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
	}{
		{in: "memory:", kind: Memory},
		{in: "memory", kind: Memory},
		{in: "memory://", kind: Memory},
		{in: "file:./idem-data", kind: File, path: "./idem-data"},
		{in: "file:idem-data", kind: File, path: "idem-data"},
		{in: "file:/var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "file:///var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "file://localhost/var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "FILE:/var/lib/idem", kind: File, path: "/var/lib/idem"},
		{in: "pebble:./idem-data", kind: Pebble, path: "./idem-data"},
		{in: "pebble:///var/lib/idem", kind: Pebble, path: "/var/lib/idem"},
		{in: "postgres://u:pw@h:5432/db?sslmode=disable&idem_schema=s&idem_table=t", kind: Postgres,
			url: "postgres://u:pw@h:5432/db?sslmode=disable", params: "schema=s,table=t"},
		{in: "postgresql://h/db", kind: Postgres, url: "postgresql://h/db"},
		{in: "postgres://h1:5432,h2:5433/db", kind: Postgres, url: "postgres://h1:5432,h2:5433/db"},
		{in: "postgres:///db", kind: Postgres, url: "postgres:///db"}, // libpq: the local socket
		{in: "postgres://?host=/run/postgresql&dbname=db", kind: Postgres, url: "postgres://?dbname=db&host=%2Frun%2Fpostgresql"},
		{in: "postgres://u:p%23w@h/db", kind: Postgres, url: "postgres://u:p%23w@h/db"},
		{in: "redis://127.0.0.1:6379/2?idem_prefix=app:", kind: Redis, url: "redis://127.0.0.1:6379/2", params: "prefix=app:"},
		{in: "redis://127.0.0.1", kind: Redis, url: "redis://127.0.0.1"},
		{in: "redis://[::1]:6379", kind: Redis, url: "redis://[::1]:6379"},
		{in: "redis://:secret@h:6379/0?dial_timeout=2s&client_name=idem", kind: Redis, url: "redis://:secret@h:6379/0?client_name=idem&dial_timeout=2s"},
		{in: "rediss://h:6380?skip_verify", kind: Redis, url: "rediss://h:6380?skip_verify="},
		{in: "redis://h:26379?master_set=mymaster&addr=h2:26379", kind: Redis, url: "redis://h:26379?addr=h2%3A26379&master_set=mymaster"},
		{in: "redis-cluster://h:7000?addr=h:7001&addr=h:7002&idem_prefix=p:", kind: RedisCluster,
			url: "redis://h:7000?addr=h%3A7001&addr=h%3A7002", params: "prefix=p:"},
		{in: "s3://bucket/prefix?endpoint=http://127.0.0.1:7070", kind: S3, url: "s3://bucket/prefix?endpoint=http://127.0.0.1:7070"},
		{in: "s3://bucket", kind: S3, url: "s3://bucket"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := Parse(tc.in)
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

// TestParseRefused: every form the parser does not know is refused with
// the right form, never read as something else. Before, redis:HOST:PORT
// (no //) opened localhost:6379, a # in a password cut it short, a file
// path after ~ made a directory named ~, and unknown Redis parameters were
// dropped.
func TestParseRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		is       error
	}{
		// No // after the scheme: the drivers read the rest as a path.
		{"redis:127.0.0.1:6390", `store "redis:127.0.0.1:6390": malformed store DSN: no // between redis: and the host; write "redis://127.0.0.1:6390"`, ErrMalformed},
		{"redis:/127.0.0.1:6390", `write "redis://127.0.0.1:6390"`, ErrMalformed},
		{"REDIS:h:6390", `write "redis://h:6390"`, ErrMalformed},
		{"rediss:h:6380", `write "rediss://h:6380"`, ErrMalformed},
		{"redis:u:secret@h:6390", `write "redis://u:xxxxx@h:6390"`, ErrMalformed},
		{"redis-cluster:h:7000?addr=h:7001", `write "redis-cluster://h:7000?addr=h:7001"`, ErrMalformed},
		{"postgres:h/db", `write "postgres://h/db"`, ErrMalformed},
		{"postgresql:h/db", `write "postgresql://h/db"`, ErrMalformed},
		{"postgres", "postgres names no host; write postgres://USER:PASSWORD@HOST:5432/DB", ErrMalformed},
		{"s3:bucket/prefix", `write "s3://bucket/prefix"`, ErrMalformed},
		// sync_replicas: a count, and a timeout only beside it.
		{"redis://h:6379?idem_sync_replicas=one", `idem_sync_replicas="one": want how many replicas every write waits for`, ErrMalformed},
		{"postgres://h/db?idem_sync_replicas=-1", `idem_sync_replicas="-1"`, ErrMalformed},
		{"postgres://h/db?idem_sync_replicas=1&idem_sync_timeout=soon", `idem_sync_timeout="soon"`, ErrMalformed},
		{"redis-cluster://h:7000?idem_sync_timeout=1s", "idem_sync_timeout bounds the wait for idem_sync_replicas, which is not set", ErrMalformed},
		// No host: the drivers fill in localhost and their default port.
		{"redis://", "it names no host, which the client would read as localhost:6379; write redis://127.0.0.1", ErrMalformed},
		{"redis://:6390", "write redis://127.0.0.1:6390", ErrMalformed},
		{"redis:///2", "write redis://127.0.0.1/2", ErrMalformed},
		{"redis-cluster://", "it names no node", ErrMalformed},
		{"postgres://", "it names no host and no database", ErrMalformed},
		{"s3:///prefix", "it names no bucket; write s3://BUCKET/PREFIX?endpoint=URL", ErrMalformed},
		// Ports that are not ports.
		{"redis://h:", `port "" of h: want a number from 1 to 65535`, ErrMalformed},
		{"redis://h:6390:1", `"h:6390:1" is not HOST:PORT`, ErrMalformed},
		{"redis://h:0", `port "0" of h`, ErrMalformed},
		{"postgres://h1:5432,h2:/db", `port "" of h2`, ErrMalformed},
		{"s3://bucket:9000/p", "a bucket has no port: the S3 server goes in ?endpoint=, e.g. s3://bucket/p?endpoint=http://HOST:9000", ErrMalformed},
		// A # ends a URL: what follows would be dropped.
		{"postgres://u:pa#ss@h/db", `store "postgres://u:pa": malformed store DSN: a # ends the URL there and the rest would be dropped; in a password or a parameter, write # as %23`, ErrMalformed},
		{"redis://h:6390#x", "a # ends the URL there", ErrMalformed},
		{"s3://bucket/p#x", "a # ends the URL there", ErrMalformed},
		// Parameters read by nobody, or read as something else.
		{"redis://h:6390?pool_size=3", "unknown parameter pool_size (a go-redis parameter; this client does not read it)", ErrMalformed},
		{"redis://h?client_cache=1", "unknown parameter client_cache (the store never reads through client-side caching)", ErrMalformed},
		{"redis://h?max_retries=3", "the client only reads max_retries=0", ErrMalformed},
		{"redis://h?protocol=4", "protocol=4: want 2 or 3", ErrMalformed},
		{"redis://h?skip_verify=true", "skip_verify is for TLS, which redis:// does not use", ErrMalformed},
		{"redis://h?client_name=", "parameter client_name is empty", ErrMalformed},
		{"redis://h/x", `invalid database number: "x"`, ErrMalformed},
		{"redis-cluster://h:7000/2", `a Redis Cluster has no databases, so the path "/2" means nothing; remove it`, ErrMalformed},
		{"redis-cluster://h:7000?pool_sise=3", "unexpected option: pool_sise", ErrMalformed},
		{"postgres://h/db?idem_prefix=x", "unknown parameter idem_prefix (want idem_schema, idem_table, idem_sync_replicas, idem_sync_timeout)", ErrMalformed},
		{"postgres://h/db?idem_schema=", "parameter idem_schema is empty", ErrMalformed},
		{"postgres://h/db?idem_schema=a&idem_schema=b", "parameter idem_schema is given 2 times; give it once", ErrMalformed},
		{"s3://bucket/p?idem_prefix=x", "unknown parameter idem_prefix (an s3 store takes none)", ErrMalformed},
		{"s3://bucket/p?endpoint=http://h:1&region=", "parameter region is empty", ErrMalformed},
		{"s3://bucket/p?endpoint=h:1", "is not an http(s) URL", nil},
		{"s3://", "it names no bucket", ErrMalformed},
		// Memory, file and pebble.
		{"memory:/x", "memory takes no path (write memory:)", ErrMalformed},
		{"memory://x", "memory takes no path", ErrMalformed},
		{"file:", "file needs a directory, e.g. file:./idem-data", ErrMalformed},
		{"pebble:", "pebble needs a directory", ErrMalformed},
		{"file:///", "", nil}, // the root directory: accepted below
		{"file://host/x", "a file store is local and file://host/ names a host; write file:host/x for a directory relative to the working directory, or file:///ABSOLUTE/PATH", ErrMalformed},
		{"file://./data", "write file:./data for a directory relative to the working directory", ErrMalformed},
		{"file:~/data", "~ is not expanded in a DSN (it would be a directory named ~); write the full path, e.g. file:/home/USER/data", ErrMalformed},
		{"pebble:~/x", "e.g. pebble:/home/USER/x", ErrMalformed},
		{"file:./data?sync=off", "a file store takes a directory and no parameters; the ? and what follows would be part of the directory's name", ErrMalformed},
		{"file:///var/lib/idem?sync=off", "a file store takes a directory and no parameters", ErrMalformed},
		{"file:///var/lib/idem#x", "after file:// a ? or # and what follows would be dropped", ErrMalformed},
		{"file:./data#1", "", nil}, // a # in a plain path is part of the name, as written
		{"file:./idem-data ", "white space around it would be part of the DSN; remove it", ErrMalformed},
		{" redis://h", "white space around it", ErrMalformed},
		// Unknown kinds, with a guess from their shape.
		{"", "store is empty: unknown store DSN: want memory:, file:PATH", ErrUnknownScheme},
		{"./idem-data", `store "./idem-data": unknown store DSN: a directory is written file:./idem-data`, ErrUnknownScheme},
		{"/var/lib/idem", "a directory is written file:/var/lib/idem", ErrUnknownScheme},
		{"idem-data", "a directory is written file:idem-data", ErrUnknownScheme},
		{"127.0.0.1:6379", "a server is named with its kind, e.g. redis://127.0.0.1:6379 or postgres://USER@127.0.0.1:6379/DB", ErrUnknownScheme},
		{"localhost:5432", "e.g. redis://localhost:5432 or postgres://USER@localhost:5432/DB", ErrUnknownScheme},
		{"mysql://u:secret@h/db", "unknown store DSN: want memory:", ErrUnknownScheme},
		{"mongodb://h/db", "unknown store DSN", ErrUnknownScheme},
		{"dynamodb:table", "dynamodb: write dynamodb://TABLE", ErrMalformed},
		{"dynamodb://table?idem_prefix=x", `unknown parameter "idem_prefix"`, ErrMalformed},
		{"sqlite:x.db", "unknown store DSN", ErrUnknownScheme},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := Parse(tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v\nwant %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not match %v", err, tc.is)
			}
			for _, pw := range []string{"secret", "ss@h"} {
				if strings.Contains(err.Error(), pw) {
					t.Errorf("error shows the password: %v", err)
				}
			}
		})
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
	// A DSN that does not parse as a URL still hides its password, in
	// Redact and in Parse's error.
	const bad = "postgres://user:hunter2@h:port/db"
	if s := Redact(bad); s != "postgres://user:xxxxx@h:port/db" {
		t.Errorf("Redact(%q) = %q", bad, s)
	}
	if _, err := Parse(bad); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Parse(%q) = %v", bad, err)
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
	// A cluster has no databases: the plain Redis's /0 goes.
	plain := strings.Replace(strings.TrimSuffix(testenv.Redis(t), "/0"), "redis://", "redis-cluster://", 1)
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

// TestRedactEveryForm: every place a DSN can hold a secret, in a DSN and
// in text that quotes one, is hidden; what is not a secret stays.
func TestRedactEveryForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, secret, keep string }{
		{"postgres://user:Hunter2pw@h/db", "Hunter2pw", "postgres://user:xxxxx@h/db"},
		{"postgres://user:Hun/ter@2pw@h/db", "Hun/ter@2pw", "@h/db"},
		{"postgres://h/db?user=u&password=Hunter2pw&sslmode=disable", "Hunter2pw", "sslmode=disable"},
		{"postgres://h/db?sslpassword=Hunter2pw", "Hunter2pw", "postgres://h/db?sslpassword=xxxxx"},
		{"host=h user=u password=Hunter2pw dbname=d", "Hunter2pw", "dbname=d"},
		{"host=h password='Hunter 2pw' dbname=d", "Hunter 2pw", "dbname=d"},
		{"redis://:Hunter2pw@h:6379/0", "Hunter2pw", "redis://:xxxxx@h:6379/0"},
		{"redis://default:Hunter2pw@h:6379/0", "Hunter2pw", "@h:6379"},
		{"redis://h:6379/0?password=Hunter2pw", "Hunter2pw", "redis://h:6379/0?password=xxxxx"},
		{"rediss-cluster://u:Hunter2pw@h:7000?addr=h:7001", "Hunter2pw", "addr=h:7001"},
		{"s3://b/p?endpoint=http://h:9000&secret_key=Hunter2pw&access_key=AK", "Hunter2pw", "access_key=AK"},
		{"s3://b/p?aws_secret_access_key=Hunter2pw", "Hunter2pw", "s3://b/p"},
		{"dynamodb://t?region=r&secret=Hunter2pw", "Hunter2pw", "region=r"},
		{"dynamodb://t?region=r&session_token=Hunter2pw", "Hunter2pw", "region=r"},
		{`store "postgres://u:Hunter2pw@h:port/db": malformed`, "Hunter2pw", "malformed"},
		{"failed: password=Hunter2pw; host=h", "Hunter2pw", "host=h"},
	} {
		got := Redact(tc.in)
		if strings.Contains(got, tc.secret) || !strings.Contains(got, tc.keep) {
			t.Errorf("Redact(%q) = %q: want %q hidden and %q kept", tc.in, got, tc.secret, tc.keep)
		}
		if r := NewRedactor(tc.in); strings.Contains(r.String("driver said: "+tc.secret), tc.secret) {
			t.Errorf("the Redactor of %q leaves the bare secret in a driver's message", tc.in)
		}
	}
	for _, s := range []string{"http://host:8080/path?a=b", "idem_prefix=x:", "file:/var/lib/idem", "key hash 3f2a"} {
		if got := Redact(s); got != s {
			t.Errorf("Redact(%q) = %q, want it as it is", s, got)
		}
	}
}

// TestParseAndOpenErrorsHideSecrets: no error of Parse, Open or Migrate,
// for every DSN form a password can take, shows it, including those of a
// store that cannot be reached and of forms the parser refuses.
func TestParseAndOpenErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	const pw = "Sup3rSecretPw"
	for _, d := range []string{
		"host=127.0.0.1 user=postgres password=" + pw + " dbname=test",
		"postgres://postgres:" + pw + "@127.0.0.1:1/test?connect_timeout=1",
		"postgres://127.0.0.1:1/test?user=postgres&password=" + pw + "&connect_timeout=1",
		"postgres://postgres:" + pw + "@127.0.0.1:1/test?bogus_param=1",
		"redis://:" + pw + "@127.0.0.1:1/0",
		"redis://127.0.0.1:6379/0?password=" + pw,
		"redis::" + pw + "@127.0.0.1:6379",
		"redis://u:" + pw + "@127.0.0.1:port/0",
		"s3://bucket/p?endpoint=http://127.0.0.1:1&secret_key=" + pw,
		"s3://AK:" + pw + "@bucket/p",
		"dynamodb://t?region=r&secret=" + pw,
		" postgres://u:" + pw + "@h/db",
		"postgres:u:" + pw + "@h/db",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, perr := Parse(d)
		o, oerr := Open(ctx, d, Options{ConnectTimeout: 3 * time.Second})
		if o != nil {
			o.Close()
		}
		_, merr := Migrate(ctx, d)
		cancel()
		for _, err := range []error{perr, oerr, merr} {
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("DSN %q: error shows the password: %v", Redact(d), err)
			}
		}
		if oerr == nil {
			t.Errorf("DSN %q opened; want a failure", Redact(d))
		}
	}
}

// TestRedactorHandler: a logger through a Redactor's handler never writes
// the DSN's password, whether it comes in the message, a string, an error,
// a Stringer, a group or an attribute bound with With.
func TestRedactorHandler(t *testing.T) {
	t.Parallel()
	const pw = "Sup3rSecretPw"
	d := "postgres://u:" + pw + "@h/db"
	var buf bytes.Buffer
	log := slog.New(NewRedactor(d).Handler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.With("store", d).Info("opening "+d, "dsn", d, "err", fmt.Errorf("driver: auth %s failed", pw),
		slog.Group("g", "inner", "password="+pw), "url", mustURL(t, d))
	log.WithGroup("grp").Debug("x", "bare", "the password is "+pw)
	out := buf.String()
	if strings.Contains(out, pw) {
		t.Errorf("the log shows the password:\n%s", out)
	}
	if strings.Count(out, "xxxxx") < 6 {
		t.Errorf("fewer redactions than attributes:\n%s", out)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
