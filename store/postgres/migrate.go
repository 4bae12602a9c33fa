package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrationsTable is the table, in Options.Schema, that records which
// migrations have been applied to which records table. It is not called
// schema_migrations so that it never collides with an application's own
// migration tool sharing the schema.
const MigrationsTable = "idem_schema_migrations"

// migration is one embedded, versioned SQL file.
type migration struct {
	version int
	name    string
	tmpl    *template.Template
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := path.Base(f)
		num, _, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("postgres store: migration %s: name must start with a positive version number", base)
		}
		text, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		t, err := template.New(base).Funcs(template.FuncMap{
			"ident": func(parts ...string) string { return pgx.Identifier{strings.Join(parts, "")}.Sanitize() },
		}).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("postgres store: migration %s: %w", base, err)
		}
		ms = append(ms, migration{version: version, name: strings.TrimSuffix(base, ".sql"), tmpl: t})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("postgres store: two migrations with version %d", ms[i].version)
		}
	}
	return ms, nil
}

// SchemaVersion is the version of the newest embedded migration: the schema
// this build of the store expects.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate creates or upgrades the records table named by opts, applying the
// embedded migrations that have not been applied yet, all in one
// transaction. It is idempotent and safe to run from several processes at
// once: a transaction-scoped advisory lock per schema serialises them, and
// whoever comes second finds nothing left to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	_, err := MigrateReport(ctx, pool, opts)
	return err
}

// Report says what MigrateReport found and did.
type Report struct {
	// Applied names the migrations applied by this call, in order.
	Applied []string
	// Recreated: the records table was recorded as migrated but did not
	// exist (dropped by hand); its records were lost and it was created
	// again.
	Recreated bool
	// Version is the schema version the table is at now.
	Version int
}

// requiredColumns are the columns the store reads and writes; a table
// lacking one was altered by hand or belongs to something else.
var requiredColumns = []string{"key_hash", "scope", "key", "fingerprint", "binding", "state", "token", "value",
	"request_id", "created_at", "updated_at", "expires_at", "lease_until", "clock_token"}

// MigrateReport is Migrate, and reports what it did. It checks what is
// really in the database, not only the migrations table: a records table
// that was dropped is created again, and a table that lacks a column the
// store needs is an error.
func MigrateReport(ctx context.Context, pool *pgxpool.Pool, opts Options) (Report, error) {
	var rep Report
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return rep, err
	}
	ms, err := migrations()
	if err != nil {
		return rep, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return rep, wrapErr(ctx, "migrate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	if err := lockSchema(ctx, tx, opts); err != nil {
		return rep, err
	}
	mt := pgx.Identifier{opts.Schema, MigrationsTable}.Sanitize()
	applied, err := appliedVersions(ctx, tx, mt, opts, &rep)
	if err != nil {
		return rep, err
	}
	if rep.Applied, err = applyMigrations(ctx, tx, mt, opts, ms, applied); err != nil {
		return rep, err
	}
	if err := checkColumns(ctx, tx, opts); err != nil {
		return rep, err
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, wrapErr(ctx, "migrate: commit", err)
	}
	rep.Version = ms[len(ms)-1].version
	return rep, nil
}

// lockSchema takes the schema's migration lock for the rest of tx, which
// serialises concurrent migrations, and creates the schema if it is
// missing.
func lockSchema(ctx context.Context, tx pgx.Tx, opts Options) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey(opts.Schema)); err != nil {
		return wrapErr(ctx, "migrate: lock", err)
	}
	// CREATE SCHEMA IF NOT EXISTS demands the CREATE privilege on the
	// database even when the schema exists, so look first: a role that may
	// only use an existing schema can still migrate.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, opts.Schema).Scan(&exists); err != nil {
		return wrapErr(ctx, "migrate: look up schema", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{opts.Schema}.Sanitize()); err != nil {
			return wrapErr(ctx, "migrate: create schema", err)
		}
	}
	return nil
}

// appliedVersions creates the migrations table mt if it is missing and
// returns the versions it records as applied to the records table. When
// the records table is gone (dropped by hand) it forgets them, so that
// the table is created again, and sets rep.Recreated.
func appliedVersions(ctx context.Context, tx pgx.Tx, mt string, opts Options, rep *Report) ([]int32, error) {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+mt+` (
		table_name text        NOT NULL,
		version    integer     NOT NULL,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (table_name, version)
	)`); err != nil {
		return nil, wrapErr(ctx, "migrate: create "+MigrationsTable, err)
	}
	rows, err := tx.Query(ctx, `SELECT version FROM `+mt+` WHERE table_name = $1`, opts.Table)
	if err != nil {
		return nil, wrapErr(ctx, "migrate: read versions", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, wrapErr(ctx, "migrate: read versions", err)
	}
	// The migrations table says what was applied, not what is there: a
	// records table dropped by hand would be reported as migrated, and
	// every request would then fail. Look.
	var tableExists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, opts.qualified()).Scan(&tableExists); err != nil {
		return nil, wrapErr(ctx, "migrate: look up table", err)
	}
	if !tableExists && len(applied) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM `+mt+` WHERE table_name = $1`, opts.Table); err != nil {
			return nil, wrapErr(ctx, "migrate: forget the dropped table", err)
		}
		applied, rep.Recreated = nil, true
	}
	return applied, nil
}

// applyMigrations runs the migrations of ms not in applied, in order,
// recording each in mt, and returns their names.
func applyMigrations(ctx context.Context, tx pgx.Tx, mt string, opts Options, ms []migration, applied []int32) ([]string, error) {
	data := struct{ Schema, Table, Name string }{
		Schema: pgx.Identifier{opts.Schema}.Sanitize(),
		Table:  opts.qualified(),
		Name:   opts.Table,
	}
	var names []string
	for _, m := range ms {
		if slices.Contains(applied, int32(m.version)) {
			continue
		}
		var sql strings.Builder
		if err := m.tmpl.Execute(&sql, data); err != nil {
			return names, fmt.Errorf("postgres store: migration %s: %w", m.name, err)
		}
		// No arguments: pgx sends it with the simple protocol, which runs
		// every statement of the file.
		if _, err := tx.Exec(ctx, sql.String()); err != nil {
			return names, wrapErr(ctx, "migrate: "+m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+mt+` (table_name, version, name) VALUES ($1, $2, $3)`,
			opts.Table, m.version, m.name); err != nil {
			return names, wrapErr(ctx, "migrate: record "+m.name, err)
		}
		names = append(names, m.name)
	}
	return names, nil
}

// checkColumns fails when the records table lacks a column the store
// needs.
func checkColumns(ctx context.Context, tx pgx.Tx, opts Options) error {
	rows, err := tx.Query(ctx, `SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`,
		opts.Schema, opts.Table)
	if err != nil {
		return wrapErr(ctx, "migrate: read columns", err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return wrapErr(ctx, "migrate: read columns", err)
	}
	var missing []string
	for _, c := range requiredColumns {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("postgres store: migrate: table %s lacks the columns %s: it was altered by hand or is not idem's; restore it, or choose another table (idem_table=)",
			opts.qualified(), strings.Join(missing, ", "))
	}
	return nil
}

// migrateLockKey is the advisory lock that serialises migrations of one
// schema (creating a schema or table concurrently fails even with IF NOT
// EXISTS).
func migrateLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idem migrate\x00"))
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

// StepsSuffix names, after the records table's name, the table of the
// recovery points that package pgtx keeps beside it (pgtx.StepsTable),
// which Drop removes with it.
const StepsSuffix = "_steps"

// ErrLiveRecords: Drop found records that have not expired, and was not
// told to drop them anyway.
var ErrLiveRecords = errors.New("postgres store: the records table holds records that have not expired")

// DropReport says what Drop removed.
type DropReport struct {
	// Tables are the tables dropped: the records table, its pgtx recovery
	// points table if there was one, and the migrations table when no
	// other records table is recorded in it.
	Tables []string
	// Live is how many unexpired records the records table held.
	Live int64
}

// Drop removes the store named by opts: its records table, the recovery
// points table pgtx keeps beside it, and its rows in the migrations
// table (the migrations table too, once no other records table is
// recorded in it), in one transaction. Unless force is set it refuses,
// with ErrLiveRecords, while the table holds records that have not
// expired: their keys would run again. Dropping a store that does not
// exist is not an error.
func Drop(ctx context.Context, pool *pgxpool.Pool, opts Options, force bool) (DropReport, error) {
	var rep DropReport
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return rep, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return rep, wrapErr(ctx, "drop", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey(opts.Schema)); err != nil {
		return rep, wrapErr(ctx, "drop: lock", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, opts.qualified()).Scan(&exists); err != nil {
		return rep, wrapErr(ctx, "drop: look up table", err)
	}
	if exists {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+opts.qualified()+` WHERE expires_at > statement_timestamp()`).Scan(&rep.Live); err != nil {
			return rep, wrapErr(ctx, "drop: count live records", err)
		}
		if rep.Live > 0 && !force {
			return rep, fmt.Errorf("%w: %d in %s", ErrLiveRecords, rep.Live, opts.qualified())
		}
	}
	steps := pgx.Identifier{opts.Schema, opts.Table + StepsSuffix}.Sanitize()
	for _, t := range []string{opts.qualified(), steps} {
		var there bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&there); err != nil {
			return rep, wrapErr(ctx, "drop: look up table", err)
		}
		if !there {
			continue
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+t); err != nil {
			return rep, wrapErr(ctx, "drop: "+t, err)
		}
		rep.Tables = append(rep.Tables, t)
	}
	if err := forgetMigrations(ctx, tx, opts, &rep); err != nil {
		return rep, err
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, wrapErr(ctx, "drop: commit", err)
	}
	return rep, nil
}

// forgetMigrations deletes the dropped table's rows from the migrations
// table, and drops that table too (adding it to rep) once no other records
// table is recorded in it.
func forgetMigrations(ctx context.Context, tx pgx.Tx, opts Options, rep *DropReport) error {
	mt := pgx.Identifier{opts.Schema, MigrationsTable}.Sanitize()
	var mtExists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, mt).Scan(&mtExists); err != nil {
		return wrapErr(ctx, "drop: look up "+MigrationsTable, err)
	}
	if !mtExists {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+mt+` WHERE table_name = $1`, opts.Table); err != nil {
		return wrapErr(ctx, "drop: forget the table's migrations", err)
	}
	var others bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+mt+`)`).Scan(&others); err != nil {
		return wrapErr(ctx, "drop: read "+MigrationsTable, err)
	}
	if others {
		return nil
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+mt); err != nil {
		return wrapErr(ctx, "drop: "+MigrationsTable, err)
	}
	rep.Tables = append(rep.Tables, mt)
	return nil
}
