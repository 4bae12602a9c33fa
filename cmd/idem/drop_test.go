package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
)

// TestMigrateDrop: `idem migrate --drop` removes a store cleanly: its
// records table, pgtx's recovery points beside it and its rows in
// idem_schema_migrations, while another store's table in the same schema
// and its rows stay; it refuses while records have not expired, unless
// --force.
func TestMigrateDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := pgSchema(t, "idem_cli_drop")
	pool, err := pgxpool.New(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	gone, other := withParam(dsn, "idem_table=gone"), withParam(dsn, "idem_table=kept")
	for _, d := range []string{gone, other} {
		if out, errOut, err := runIdem(t, "migrate", "--store", d); err != nil {
			t.Fatalf("migrate: %v %s %s", err, out, errOut)
		}
	}
	opts := postgres.Options{Schema: schema, Table: "gone"}
	if err := pgtx.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	st, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, store.ReserveRequest{Record: store.Record{KeyHash: store.HashKey("s", "k"), Scope: "s", Key: "k",
		State: store.InProgress, Token: 1}, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	if _, errOut, err := runIdem(t, "migrate", "--store", gone, "--drop"); err == nil || !strings.Contains(errOut, "1 in") || !strings.Contains(errOut, "--force") {
		t.Fatalf("--drop with a live record: %v %q", err, errOut)
	}
	out, errOut, err := runIdem(t, "migrate", "--store", gone, "--drop", "--force")
	if err != nil || !strings.Contains(out, `dropped "`+schema+`"."gone", "`+schema+`"."gone_steps" (1 records had not expired)`) {
		t.Fatalf("--drop --force: %v %q %q", err, out, errOut)
	}
	tables := func() (names []string, rows []string) {
		r, err := pool.Query(ctx, `SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, schema)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var n string
			_ = r.Scan(&n)
			names = append(names, n)
		}
		r, err = pool.Query(ctx, `SELECT DISTINCT table_name FROM `+schema+`.`+postgres.MigrationsTable+` ORDER BY 1`)
		if err != nil {
			return names, nil
		}
		for r.Next() {
			var n string
			_ = r.Scan(&n)
			rows = append(rows, n)
		}
		return names, rows
	}
	if names, rows := tables(); strings.Join(names, ",") != "idem_schema_migrations,kept" || strings.Join(rows, ",") != "kept" {
		t.Fatalf("after dropping one store: tables %v, migrations recorded for %v", names, rows)
	}
	if out, _, err := runIdem(t, "migrate", "--store", gone, "--drop"); err != nil || !strings.Contains(out, "nothing to drop") {
		t.Fatalf("dropping it again: %v %q", err, out)
	}
	if out, errOut, err := runIdem(t, "migrate", "--store", other, "--drop"); err != nil || !strings.Contains(out, "idem_schema_migrations") {
		t.Fatalf("dropping the last store: %v %q %q", err, out, errOut)
	}
	if names, _ := tables(); len(names) != 0 {
		t.Fatalf("after dropping both: tables %v", names)
	}
}
