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

	"github.com/idem-dev/idem/internal/testenv"
	"github.com/idem-dev/idem/store"
)

func TestParse(t *testing.T) {
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
	now := time.Now()
	kh := store.HashKey("dsn-test", fmt.Sprint(rand.Uint64()))
	rec := store.Record{KeyHash: kh, Scope: "dsn-test", Key: "k", State: store.InProgress, Token: 7,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour), LeaseUntil: now.Add(time.Minute)}
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Now: now})
	if err != nil || !res.Acquired {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	f := store.Fence{KeyHash: kh, Scope: "dsn-test", Token: 7}
	if err := s.Complete(ctx, store.Completion{Fence: f, State: store.Succeeded, Value: []byte("v"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "dsn-test", kh, now)
	if err != nil || string(got.Value) != "v" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

type counter interface {
	CountExpired(context.Context, time.Time) (int, error)
}

func TestOpenMemoryAndFile(t *testing.T) {
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
	if _, err := Open(ctx, "file:"+dir, Options{}); err == nil || !strings.Contains(err.Error(), "gateway running") {
		t.Errorf("second Open = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenPostgres(t *testing.T) {
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
	v, err := Migrate(ctx, dsn)
	if err != nil || v < 1 {
		t.Fatalf("Migrate = %d, %v", v, err)
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
	if n, err := c.CountExpired(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 1 {
		t.Errorf("CountExpired = %d, %v; want 1", n, err)
	}
	if _, err := Migrate(ctx, "memory:"); !errors.Is(err, ErrNotPostgres) {
		t.Errorf("Migrate(memory:) = %v", err)
	}
}

func TestOpenRedis(t *testing.T) {
	url := testenv.Redis(t)
	o, err := Open(context.Background(), url+"?idem_prefix=idem-dsn-test:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	roundTrip(t, o)
}

func TestOpenUnreachable(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"postgres://postgres@127.0.0.1:1/x?connect_timeout=1", "redis://127.0.0.1:1/0"} {
		if _, err := Open(ctx, dsn, Options{ConnectTimeout: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "cannot connect") {
			t.Errorf("Open(%s) = %v, want cannot connect", dsn, err)
		}
	}
}
