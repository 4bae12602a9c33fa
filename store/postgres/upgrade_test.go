package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// earlier is a replica of the version before leases were judged on the
// server's clock, as it runs during a rolling upgrade: it sends that
// version's statements, verbatim, with every instant read from its own
// clock, which is skew off the server's.
type earlier struct {
	pool  *pgxpool.Pool
	table string
	skew  time.Duration
	lease time.Duration
}

// earlierColumns and the statements below are the earlier version's.
const earlierColumns = `scope, key, fingerprint, binding, state, token, value, request_id,
	created_at, updated_at, expires_at, lease_until`

func (e *earlier) reserveSQL() string {
	table := e.table
	return `WITH old AS (
	SELECT ` + earlierColumns + ` FROM ` + table + ` WHERE key_hash = $1
), ins AS (
	INSERT INTO ` + table + ` AS r (key_hash, scope, key, fingerprint, binding, state, token, value,
		request_id, created_at, updated_at, expires_at, lease_until)
	SELECT $1, $2, $3, $4, $5, 'in_progress', $6, NULL, $7, $8, $9, $10, $11
	WHERE NOT EXISTS (SELECT FROM old o WHERE o.expires_at > $12
		AND NOT ($13 AND o.state = 'in_progress' AND o.lease_until <= $12
			AND o.fingerprint = $4 AND o.binding = $5))
	ON CONFLICT (key_hash) DO UPDATE SET
		scope = excluded.scope, key = excluded.key, fingerprint = excluded.fingerprint,
		binding = excluded.binding, state = 'in_progress', token = excluded.token, value = NULL,
		request_id = excluded.request_id, created_at = excluded.created_at,
		updated_at = excluded.updated_at, expires_at = excluded.expires_at,
		lease_until = excluded.lease_until
	WHERE r.expires_at <= $12
		OR ($13 AND r.state = 'in_progress' AND r.lease_until <= $12
			AND r.fingerprint = excluded.fingerprint AND r.binding = excluded.binding)
	RETURNING xmax
)
SELECT true, ins.xmax <> 0 AND COALESCE((SELECT o.expires_at > $12 FROM old o), true),
	'', '', '', '', '', 0::bigint, NULL::bytea, '', $12, $12, $12, $12
FROM ins
UNION ALL
SELECT false, false, ` + earlierColumns + ` FROM old WHERE NOT EXISTS (SELECT FROM ins)`
}

func (e *earlier) now() time.Time { return time.Now().Add(e.skew) }

// reserve runs the earlier version's Reserve of key for token and reports
// whether it acquired the key.
func (e *earlier) reserve(t testing.TB, key string, token uint64) bool {
	t.Helper()
	kh, _ := keyHash(store.HashKey("test", key))
	now := e.now()
	rows, err := e.pool.Query(context.Background(), e.reserveSQL(), kh, "test", key, "fp", "POST /x", int64(token), "req-earlier",
		now, now, now.Add(time.Hour), now.Add(e.lease), now, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("earlier reserve of %s: no row (%v)", key, rows.Err())
	}
	vals, err := rows.Values()
	if err != nil {
		t.Fatal(err)
	}
	acquired, _ := vals[0].(bool)
	return acquired
}

// renew runs the earlier version's Renew and reports whether the token
// still held the row.
func (e *earlier) renew(t testing.TB, key string, token uint64) bool {
	t.Helper()
	kh, _ := keyHash(store.HashKey("test", key))
	tag, err := e.pool.Exec(context.Background(), `UPDATE `+e.table+` SET lease_until = $3
	WHERE key_hash = $1 AND token = $2 AND state = 'in_progress'`, kh, int64(token), e.now().Add(e.lease))
	if err != nil {
		t.Fatal(err)
	}
	return tag.RowsAffected() == 1
}

// complete runs the earlier version's Complete with a lifetime of ttl.
func (e *earlier) complete(t testing.TB, key string, token uint64, value string, ttl time.Duration) {
	t.Helper()
	kh, _ := keyHash(store.HashKey("test", key))
	now := e.now()
	tag, err := e.pool.Exec(context.Background(), `UPDATE `+e.table+` SET state = $3, value = $4, updated_at = $5, expires_at = $6
	WHERE key_hash = $1 AND token = $2 AND state = 'in_progress'`, kh, int64(token), "succeeded", []byte(value), now, now.Add(ttl))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("earlier complete of %s: %v, %d rows", key, err, tag.RowsAffected())
	}
}

// schemaV1 returns the options of a records table as the earlier version
// left it: migrated, then migration 0002 undone.
func schemaV1(t testing.TB, pool *pgxpool.Pool) Options {
	t.Helper()
	opts := freshSchema(t, pool).WithDefaults()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER TABLE `+opts.qualified()+` DROP COLUMN clock_token`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{opts.Schema, MigrationsTable}.Sanitize()+
		` WHERE table_name = $1 AND version >= 2`, opts.Table); err != nil {
		t.Fatal(err)
	}
	return opts
}

// TestEarlierVersionRows: rows that replicas of the earlier version wrote,
// on clocks 10 leases off the server's, before and during a rolling
// upgrade, are judged right by this version once `idem migrate` has run: a
// holder that renews, however far behind its clock, is never taken over;
// a dead holder's key is taken over within two leases of its last
// renewal, however far ahead its clock; completed rows replay. Judged on
// the server's clock by their lease_until, the first would be taken over
// at once and the others only after 10 leases or more.
func TestEarlierVersionRows(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	pool := testPool(t, 8)
	opts := schemaV1(t, pool)
	ctx := context.Background()
	behind := &earlier{pool: pool, table: opts.qualified(), skew: -10 * lease, lease: lease}
	ahead := &earlier{pool: pool, table: opts.qualified(), skew: 10 * lease, lease: lease}

	// Before the upgrade: the earlier version's rows.
	if !behind.reserve(t, "renewing", 101) || !ahead.reserve(t, "dead-ahead", 102) || !behind.reserve(t, "done", 103) {
		t.Fatal("the earlier version did not acquire its keys")
	}
	behind.complete(t, "done", 103, "the answer", time.Hour)

	// This version refuses the table until it is migrated, naming the fix.
	s := newTestStore(t, pool, opts)
	if _, err := s.Get(ctx, "test", store.HashKey("test", "done")); err == nil || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("Get on an unmigrated table: %v, want a hint to migrate", err)
	}
	rep, err := MigrateReport(ctx, pool, opts)
	if err != nil || len(rep.Applied) != 1 || rep.Applied[0] != "0002_clock_token" {
		t.Fatalf("migrate: %+v, %v", rep, err)
	}

	// During the upgrade: an earlier replica whose clock is ahead takes
	// over a row of this version, which it judges stale by its clock, and
	// dies. The row keeps this version's clock_token with the earlier
	// replica's token.
	mine := request("taken-by-earlier", 201)
	if res, err := s.Reserve(ctx, mine); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	farAhead := &earlier{pool: pool, table: opts.qualified(), skew: 2 * time.Minute, lease: lease}
	if !farAhead.reserve(t, "taken-by-earlier", 202) {
		t.Fatal("the earlier replica did not take the key over")
	}

	t.Run("completed", func(t *testing.T) {
		t.Parallel()
		got, err := s.Get(ctx, "test", store.HashKey("test", "done"))
		if err != nil || got.State != store.Succeeded || string(got.Value) != "the answer" || got.Stale() {
			t.Fatalf("Get: %+v %v", got, err)
		}
		res, err := s.Reserve(ctx, request("done", 301))
		if err != nil || res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "the answer" {
			t.Fatalf("Reserve over it: %+v %v", res, err)
		}
	})

	storetest.EarlierHolders(t, s, lease, func(key string, token uint64) store.ReserveRequest {
		r := request(key, token)
		r.Lease = lease
		return r
	}, behind.renew)
}

// TestEarlierVersionReadsThisVersion: a replica of the earlier version
// still reads the rows this version writes during the upgrade (its
// columns are all there, on the server's clock), and a row it writes
// after the migration is an earlier version's row to this one.
func TestEarlierVersionReadsThisVersion(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	opts := freshSchema(t, pool).WithDefaults()
	s := newTestStore(t, pool, opts)
	ctx := context.Background()
	if res, err := s.Reserve(ctx, request("new", 1)); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	e := &earlier{pool: pool, table: opts.qualified(), lease: time.Minute}
	if e.reserve(t, "new", 2) {
		t.Fatal("the earlier version took a live key over")
	}
	if !e.reserve(t, "old", 3) {
		t.Fatal("the earlier version did not reserve a new key")
	}
	kh, _ := keyHash(store.HashKey("test", "old"))
	var got row
	if err := pool.QueryRow(ctx, s.sql.get, kh).Scan(got.dest()...); err != nil {
		t.Fatal(err)
	}
	if !got.legacy() {
		t.Fatal("a row of the earlier version taken for one on the server's clock")
	}
	kh, _ = keyHash(store.HashKey("test", "new"))
	if err := pool.QueryRow(ctx, s.sql.get, kh).Scan(got.dest()...); err != nil {
		t.Fatal(err)
	}
	if got.legacy() {
		t.Fatal("a row of this version taken for an earlier version's")
	}
}
