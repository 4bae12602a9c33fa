package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/leasewatch"
	"github.com/idem-dev/idem/store/replication"
)

// Defaults of Options.
const (
	DefaultSchema       = "public"
	DefaultTable        = "idem_records"
	DefaultCleanupBatch = 1000
)

// ErrInvalidKeyHash: a KeyHash is not a hex SHA-256 (store.HashKey's form),
// the only form the table's primary key holds.
var ErrInvalidKeyHash = errors.New("postgres store: key hash is not a hex SHA-256")

// Options says where the store keeps its records. The zero value uses
// public.idem_records.
type Options struct {
	// Schema holds the records table and the migrations table; "" means
	// "public". Tests give each store its own schema to isolate it.
	Schema string
	// Table is the records table; "" means "idem_records". Several tables
	// may live in one schema.
	Table string
	// CleanupBatch is how many rows one Cleanup transaction deletes at
	// most; 0 means 1000. Each batch commits on its own, so no row lock is
	// held for longer than one batch.
	CleanupBatch int
	// NotifyRecordMax is the longest notification payload, in bytes, that
	// carries a completed, sealed record to waiters in other processes
	// (store.RecordCarrier, used by package seal only: unsealed records
	// never cross the channel), sparing each a read of the table; a record
	// that does not fit is announced by its key hash alone and its waiters
	// read it. 0 means DefaultNotifyRecordMax (7999, PostgreSQL's limit); a
	// negative value sends key hashes only.
	NotifyRecordMax int
	// ReadFirstAfter is the share of recent reservations that found their
	// key's record (retries) above which Reserve first reads the key with
	// a plain SELECT, and runs the reservation statement only when that
	// read finds nothing to answer with (no record, an expired one, or a
	// stale one to take over). The reservation statement is a
	// data-modifying CTE that costs PostgreSQL more than a SELECT even
	// when it writes nothing (pgbench: docs/bench/STORE-DESIGN.md). A
	// first call in read-first mode pays one more round trip, so the
	// store reads first only while retries are most of its traffic (a
	// client retry storm, a replaying fleet). 0 means DefaultReadFirstAfter (0.7); a negative value always
	// reads first; 1 or more never does.
	ReadFirstAfter float64
	// SyncReplicas, when above 0, is how many synchronous standbys must
	// have every write before the store answers: a failover to one of
	// them then loses nothing idem answered. PostgreSQL does the waiting
	// (synchronous_standby_names on the primary, and the session's
	// synchronous_commit on, remote_write or remote_apply); Replication,
	// which the gateway runs at start, refuses a server that would not
	// wait for that many. A write not confirmed within SyncTimeout fails
	// with replication.ErrNotReplicated (fail closed); PostgreSQL keeps
	// it invisible to other sessions while it waits.
	SyncReplicas int
	// SyncTimeout bounds each write when SyncReplicas is set; 0 means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
}

// DefaultSyncTimeout is Options.SyncTimeout's default: long enough for a
// standby across a slow network, short against the engine's lease.
const DefaultSyncTimeout = 2 * time.Second

// DefaultReadFirstAfter is Options.ReadFirstAfter's default.
const DefaultReadFirstAfter = 0.7

// WithDefaults returns o with its zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.CleanupBatch <= 0 {
		o.CleanupBatch = DefaultCleanupBatch
	}
	if o.NotifyRecordMax == 0 {
		o.NotifyRecordMax = DefaultNotifyRecordMax
	}
	if o.ReadFirstAfter == 0 {
		o.ReadFirstAfter = DefaultReadFirstAfter
	}
	if o.SyncReplicas > 0 && o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	return o
}

func (o Options) validate() error {
	// PostgreSQL truncates identifiers to 63 bytes; the table name also
	// prefixes its index and constraint names ("_expires_at_idx").
	if len(o.Schema) > 63 {
		return fmt.Errorf("postgres store: schema name %q is longer than 63 bytes", o.Schema)
	}
	if len(o.Table) > 48 {
		return fmt.Errorf("postgres store: table name %q is longer than 48 bytes", o.Table)
	}
	if o.SyncReplicas < 0 {
		return fmt.Errorf("postgres store: SyncReplicas %d is negative", o.SyncReplicas)
	}
	return nil
}

func (o Options) qualified() string { return pgx.Identifier{o.Schema, o.Table}.Sanitize() }

// Store keeps idempotency records in a PostgreSQL table. It is safe for
// concurrent use, and any number of Stores in any number of processes may
// share one table.
type Store struct {
	pool   *pgxpool.Pool
	opts   Options
	sql    statements
	closed atomic.Bool

	// chanName is the table's LISTEN/NOTIFY channel (channelOf).
	chanName string
	// notify is the listening connection of Subscribe, made once by
	// notifyOnce (notify.go).
	notifyOnce sync.Once
	notify     *wakeup.Listener

	// retries counts re-runs of the reserve statement (tests read it).
	retries atomic.Int64
	// found is the share of recent reservations that found their key's
	// record, in 1/1024ths, moving 1/16 of the way at each (see
	// Options.ReadFirstAfter); reads counts the reservations answered by
	// a read (tests read it).
	found atomic.Int32
	reads atomic.Int64

	// afterBatch, when set (by tests), is told how long each Cleanup batch
	// took: an upper bound of how long its row locks were held.
	afterBatch func(deleted int, took time.Duration)

	// watch judges the leases of rows an earlier version wrote (see
	// row.legacy).
	watch leasewatch.Watcher
}

var _ store.Store = (*Store)(nil)

// New returns a store over the table named by opts, which Migrate must have
// created. New does no I/O. The store does not own pool: Close does not
// close it.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres store: nil pool")
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{pool: pool, opts: opts, sql: newStatements(opts.qualified()), chanName: channelOf(opts)}, nil
}

// Options returns the store's options, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// columns are the record columns every read returns, in scan order,
// followed by the server's clock when it read them (row.dest).
const columns = `scope, key, fingerprint, binding, state, token, value, request_id,
	created_at, updated_at, expires_at, lease_until, clock_token`

// The server's clock. Every statement judges leases and expiry, and sets
// the times it writes, by statement_timestamp(): the time the server
// received the statement. It is the same instant throughout a statement,
// so the judgement, the times written and the time read back with a row
// (Record.ReadAt) agree; clock_timestamp() moves while a statement runs.
// now() is the start of the transaction, which for a single statement is
// the same instant, but which for CompleteTx, run inside a caller's own
// transaction (package pgtx), would date the completion back to when that
// transaction began. A statement that waits on a row lock judges by the
// time it arrived: a lease then looks longer, never shorter, than it is.
const (
	serverNow = `statement_timestamp()`
	// microseconds turns a bigint parameter of microseconds into an
	// interval: leases and lifetimes travel as durations, never as the
	// caller's instants.
	microseconds = ` * interval '1 microsecond'`
)

// staleOf is the condition, on the row named x, that its in_progress
// lease is over. A row whose reservation wrote its times on the server's
// clock (clock_token = token) is stale once its lease_until has passed on
// it. A row of an earlier version (legacyRow) holds its writer's clock,
// which nothing relates to the server's: it is stale only when it is the
// very version, token and lease_until, that this process watched unchanged
// for a whole lease ($11, $12; see Store.judge). Never NULL: a NULL would
// make the reserve statement attempt its INSERT, and lock the row, for a
// row it then leaves alone.
func staleOf(x string) string {
	return `(CASE WHEN ` + x + `.clock_token = ` + x + `.token THEN ` + x + `.lease_until <= ` + serverNow +
		` ELSE COALESCE(` + x + `.token = $11 AND ` + x + `.lease_until = $12, false) END)`
}

type statements struct {
	reserve, get, renew, complete, release, cleanup, countExpired string
}

// reserveStatement is the reserve statement on table.
//
// One statement, one round trip. The INSERT writes when the key is
// absent, or replaces the row when it is expired or, with $10, a
// stale in_progress row of the same request. When it writes
// nothing, the second branch returns the row read by "old".
//
// When "old" already shows a live row that the request may not
// replace (a replay, a conflict, a running holder), the INSERT is
// not even attempted: ON CONFLICT DO UPDATE locks the conflicting
// row even when its WHERE is false, which made every replay a
// write (a row lock, about 100 bytes of WAL and a commit). The
// answer is then the row as of the statement's snapshot, which is
// a moment inside the call.
//
// "old" reads the statement's snapshot, while ON CONFLICT judges the
// newest committed row version. They differ when another
// transaction committed this key after the snapshot was taken: then
// "old" finds no row, or a row the INSERT would have replaced, and
// Reserve runs the statement again with a new snapshot.
//
// xmax is 0 on a freshly inserted row and not 0 on a replaced one;
// a replaced row that "old" saw unexpired was a stale lease. (A
// replaced row that "old" did not see was committed meanwhile and
// is already stale or expired: it is reported as a takeover, the
// cautious answer.)
//
//	$1 key hash, $2 scope, $3 key, $4 fingerprint, $5 binding,
//	$6 token, $7 request ID, $8 lease and $9 lifetime in
//	microseconds, $10 take over a stale lease, $11 and $12 the
//	token and lease_until of an earlier version's row watched for
//	a whole lease (NULL when none)
func reserveStatement(table string) string {
	return `WITH old AS (
	SELECT ` + columns + ` FROM ` + table + ` WHERE key_hash = $1
), ins AS (
	INSERT INTO ` + table + ` AS r (key_hash, scope, key, fingerprint, binding, state, token, value,
		request_id, created_at, updated_at, expires_at, lease_until, clock_token)
	SELECT $1, $2, $3, $4, $5, 'in_progress', $6, NULL, $7, ` + serverNow + `, ` + serverNow + `,
		` + serverNow + ` + $9::bigint` + microseconds + `, ` + serverNow + ` + $8::bigint` + microseconds + `, $6
	WHERE NOT EXISTS (SELECT FROM old o WHERE o.expires_at > ` + serverNow + `
		AND NOT ($10 AND o.state = 'in_progress' AND ` + staleOf("o") + `
			AND o.fingerprint = $4 AND o.binding = $5))
	ON CONFLICT (key_hash) DO UPDATE SET
		scope = excluded.scope, key = excluded.key, fingerprint = excluded.fingerprint,
		binding = excluded.binding, state = 'in_progress', token = excluded.token, value = NULL,
		request_id = excluded.request_id, created_at = excluded.created_at,
		updated_at = excluded.updated_at, expires_at = excluded.expires_at,
		lease_until = excluded.lease_until, clock_token = excluded.clock_token
	WHERE r.expires_at <= ` + serverNow + `
		OR ($10 AND r.state = 'in_progress' AND ` + staleOf("r") + `
			AND r.fingerprint = excluded.fingerprint AND r.binding = excluded.binding)
	RETURNING xmax
)
SELECT true, ins.xmax <> 0 AND COALESCE((SELECT o.expires_at > ` + serverNow + ` FROM old o), true),
	'', '', '', '', '', 0::bigint, NULL::bytea, '', ` + serverNow + `, ` + serverNow + `, ` + serverNow + `, ` + serverNow + `,
	NULL::bigint, ` + serverNow + `
FROM ins
UNION ALL
SELECT false, false, ` + columns + `, ` + serverNow + ` FROM old WHERE NOT EXISTS (SELECT FROM ins)`
}

// newStatements returns the store's statements on table, its qualified
// name.
func newStatements(table string) statements {
	return statements{
		reserve: reserveStatement(table),

		get: `SELECT ` + columns + `, ` + serverNow + ` FROM ` + table + ` WHERE key_hash = $1 AND expires_at > ` + serverNow,

		// Every write out of in_progress is fenced by the holder's token.
		// A renewal or completion marks the row's times as the server's
		// (clock_token): only the holder writes them, and it writes them
		// on the server's clock.
		renew: `UPDATE ` + table + ` SET lease_until = ` + serverNow + ` + $3::bigint` + microseconds + `, clock_token = token
	WHERE key_hash = $1 AND token = $2 AND state = 'in_progress'`,
		complete: `UPDATE ` + table + ` SET state = $3, value = $4, updated_at = ` + serverNow + `,
		expires_at = ` + serverNow + ` + $5::bigint` + microseconds + `, clock_token = token
	WHERE key_hash = $1 AND token = $2 AND state = 'in_progress'`,
		// Release frees an in_progress or a failed row, never a
		// succeeded one (store.Store's Release).
		release: `DELETE FROM ` + table + ` WHERE key_hash = $1 AND token = $2 AND state <> 'succeeded'`,

		// One batch: walk the expires_at index, lock what it finds (skipping
		// rows another transaction holds, such as a Reserve replacing an
		// expired row), and delete those rows by their physical address. A
		// row updated since the snapshot is re-checked by FOR UPDATE, and
		// again by the outer condition.
		cleanup: `DELETE FROM ` + table + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + table + ` WHERE expires_at <= ` + serverNow + `
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)) AND expires_at <= ` + serverNow,
		// The same index range as cleanup walks.
		countExpired: `SELECT count(*) FROM ` + table + ` WHERE expires_at <= ` + serverNow,
	}
}

// micros is d in whole microseconds, the precision timestamptz keeps,
// rounded up: a lease or a lifetime is never cut short by the rounding.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// maxReserveAttempts bounds the re-runs of the reserve statement. One re-run
// is enough unless the key is written again between every two attempts.
const maxReserveAttempts = 16

// Reserve implements store.Store in one statement, so one round trip, except
// when a concurrent writer commits the same key while it runs, or when it
// takes over a stale row of an earlier version (see legacyRow).
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	if err := s.check(ctx); err != nil {
		return store.Reservation{}, err
	}
	r := &req.Record
	kh, err := keyHash(r.KeyHash)
	if err != nil {
		return store.Reservation{}, err
	}
	// watched is an earlier version's stale row that the statement may
	// take over: its token and lease_until, as read.
	var watched *row
	if s.readFirst() {
		res, answered, w, err := s.reserveRead(ctx, kh, req)
		if err != nil || answered {
			return res, err
		}
		watched = w
	}
	for range maxReserveAttempts {
		acquired, tookOver, got, err := s.reserveOnce(ctx, kh, req, watched)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			s.retries.Add(1) // the conflicting row is newer than the snapshot
			continue
		case retryable(err):
			s.retries.Add(1)
			continue
		case err != nil:
			return store.Reservation{}, wrapErr(ctx, "reserve", err)
		case acquired:
			s.saw(false)
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		}
		cur := s.judge(&got, kh, req.Lease)
		if answers(&cur, req) {
			s.saw(true)
			return store.Reservation{Existing: cur}, nil
		}
		if got.legacy() {
			// An earlier version's row, watched unchanged for a whole
			// lease: the statement may now take it over, if it is still
			// that version.
			watched = &got
		}
		// Otherwise the snapshot shows a row the INSERT would have
		// replaced, so the newest version, which stopped it, is another
		// one: look again.
		s.retries.Add(1)
	}
	return store.Reservation{}, fmt.Errorf("postgres store: reserve: key %s changed under %d attempts in a row", r.KeyHash, maxReserveAttempts)
}

// reserveRead is Reserve's look before it writes (see readFirst): a row
// that answers req is the answer (answered), with no write; an earlier
// version's row that does not is returned as watched.
func (s *Store) reserveRead(ctx context.Context, kh []byte, req store.ReserveRequest) (res store.Reservation, answered bool, watched *row, err error) {
	got, found, err := s.read(ctx, "reserve", kh)
	if err != nil || !found {
		return store.Reservation{}, false, nil, err
	}
	cur := s.judge(&got, kh, req.Lease)
	if answers(&cur, req) {
		s.reads.Add(1)
		s.saw(true)
		return store.Reservation{Existing: cur}, true, nil, nil
	}
	if got.legacy() {
		return store.Reservation{}, false, &got, nil
	}
	return store.Reservation{}, false, nil, nil
}

// reserveOnce runs the reserve statement once, within the store's bound
// on a write.
func (s *Store) reserveOnce(ctx context.Context, kh []byte, req store.ReserveRequest, watched *row) (acquired, tookOver bool, got row, err error) {
	wctx, done := s.bound(ctx)
	defer done()
	err = s.pool.QueryRow(wctx, s.sql.reserve, reserveArgs(kh, req, watched)...).
		Scan(append([]any{&acquired, &tookOver}, got.dest()...)...)
	return acquired, tookOver, got, s.unconfirmed(ctx, wctx, "reserve", err)
}

// reserveArgs are the reserve statement's parameters for req; watched is
// the earlier version's row that it may take over, or nil.
func reserveArgs(kh []byte, req store.ReserveRequest, watched *row) []any {
	r := &req.Record
	var watchedToken, watchedUntil any // NULL
	if watched != nil {
		watchedToken, watchedUntil = watched.token, watched.leaseUntil
	}
	return []any{kh, r.Scope, r.Key, r.Fingerprint, r.Binding, int64(r.Token), r.RequestID,
		micros(req.Lease), micros(req.TTL), req.TakeOverStale, watchedToken, watchedUntil}
}

// answers reports whether cur, the key's record as read and judged, is
// Reserve's answer to req: live, and not a stale holder's that req may
// take over. It judges as the reserve statement does, on the time the
// server read the row.
func answers(cur *store.Record, req store.ReserveRequest) bool {
	r := &req.Record
	live := cur.ReadAt.Before(cur.ExpiresAt)
	return live && !(req.TakeOverStale && cur.Stale() &&
		cur.Fingerprint == r.Fingerprint && cur.Binding == r.Binding)
}

// read returns kh's row if it is live on the server's clock, and whether
// there was one.
func (s *Store) read(ctx context.Context, op string, kh []byte) (row, bool, error) {
	var got row
	err := s.pool.QueryRow(ctx, s.sql.get, kh).Scan(got.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, wrapErr(ctx, op, err)
	}
	return got, true, nil
}

// judge returns the record of got, a row of kh, with ReadAt the server's
// time when it read the row, and LeaseLeft as judged then: on the server's
// clock, or for an earlier version's in_progress row, by watching it
// (legacyRow) with the lease lease; 0 means the holder's own span.
func (s *Store) judge(got *row, kh []byte, lease time.Duration) store.Record {
	r := got.record(kh)
	r.SetReadAt(got.now.UTC())
	if r.State == store.InProgress && got.legacy() {
		if lease <= 0 {
			// Get has no lease to go by. Until its first renewal an
			// earlier version's row spans exactly its lease, on its
			// writer's clock, and after that more: never less.
			lease = max(r.LeaseUntil.Sub(r.UpdatedAt), 0)
		}
		version := strconv.FormatInt(got.token, 10) + "@" + strconv.FormatInt(got.leaseUntil.UnixMicro(), 10)
		r.LeaseLeft = s.watch.Left(r.KeyHash, version, lease)
		// For display, on the server's clock like the other times read.
		r.LeaseUntil = r.ReadAt.Add(r.LeaseLeft)
	}
	return r
}

// readFirst reports whether Reserve reads before reserving (see
// Options.ReadFirstAfter).
func (s *Store) readFirst() bool {
	switch after := s.opts.ReadFirstAfter; {
	case after < 0:
		return true
	case after >= 1:
		return false
	default:
		return float64(s.found.Load()) > after*1024
	}
}

// saw moves the share of reservations that found a record towards found.
// Racing updates may lose one another's step, which a moving share does
// not mind.
func (s *Store) saw(found bool) {
	f := s.found.Load()
	if found {
		f += (1024 - f + 15) / 16
	} else {
		f -= (f + 15) / 16
	}
	s.found.Store(f)
}

// Get implements store.Store. The scope is part of the key hash already.
func (s *Store) Get(ctx context.Context, _, keyHashHex string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	kh, err := keyHash(keyHashHex)
	if err != nil {
		return store.Record{}, err
	}
	got, found, err := s.read(ctx, "get", kh)
	if err != nil {
		return store.Record{}, err
	}
	if !found {
		return store.Record{}, store.ErrNotFound
	}
	return s.judge(&got, kh, 0), nil
}

// Renew implements store.Store: the lease runs lease from the server's
// now.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.fenced(ctx, "renew", s.sql.renew, f, micros(lease))
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if !c.State.Valid() || c.State == store.InProgress {
		return fmt.Errorf("postgres store: complete: state %q is not succeeded or failed", c.State)
	}
	return s.fenced(ctx, "complete", s.sql.complete, c.Fence, string(c.State), c.Value, micros(c.TTL))
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.fenced(ctx, "release", s.sql.release, f)
}

// fenced runs a write guarded by f's token: no row written means the token
// no longer holds the record.
func (s *Store) fenced(ctx context.Context, op, sql string, f store.Fence, args ...any) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	kh, err := keyHash(f.KeyHash)
	if err != nil {
		return err
	}
	wctx, done := s.bound(ctx)
	defer done()
	tag, err := s.pool.Exec(wctx, sql, append([]any{kh, int64(f.Token)}, args...)...)
	if err = s.unconfirmed(ctx, wctx, op, err); err != nil {
		return wrapErr(ctx, op, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

// errSyncBound ends the context of a write that SyncTimeout bounds.
var errSyncBound = errors.New("synchronous standbys did not confirm in time")

// bound returns ctx bounded by SyncTimeout when the store waits for
// synchronous standbys: PostgreSQL waits for them without end, and the
// write is then told apart from a store that answers (unconfirmed).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opts.SyncReplicas <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, s.opts.SyncTimeout, errSyncBound)
}

// unconfirmed turns err, the error of a write run under wctx (bound's),
// into replication.ErrNotReplicated when the bound ended it and the
// caller's ctx had not ended. pgx gives up on the connection at the
// deadline without asking the server to cancel: a cancelled wait for
// standbys would make the commit visible on the primary alone, while a
// backend left waiting keeps it invisible until the standbys have it.
func (s *Store) unconfirmed(ctx, wctx context.Context, op string, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(context.Cause(wctx), errSyncBound) {
		return err
	}
	return fmt.Errorf("%w: %d synchronous standby(s) did not confirm the %s within %s (a failover now may lose it): %w",
		replication.ErrNotReplicated, s.opts.SyncReplicas, op, s.opts.SyncTimeout, err)
}

// Cleanup implements store.Store. It deletes in batches of
// Options.CleanupBatch rows, each its own transaction, and stops at limit,
// when a batch comes back short, or when ctx is done (returning what it
// deleted so far with the context's error).
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	total := 0
	for limit <= 0 || total < limit {
		if err := s.check(ctx); err != nil {
			return total, err
		}
		n := s.opts.CleanupBatch
		if limit > 0 {
			n = min(n, limit-total)
		}
		start := time.Now()
		tag, err := s.pool.Exec(ctx, s.sql.cleanup, n)
		if err != nil {
			return total, wrapErr(ctx, "cleanup", err)
		}
		deleted := int(tag.RowsAffected())
		if s.afterBatch != nil {
			s.afterBatch(deleted, time.Since(start))
		}
		total += deleted
		if deleted < n {
			// Nothing left, or only rows other transactions hold right
			// now; those are for the next run.
			break
		}
	}
	return total, nil
}

// CountExpired counts the records expired on the server's clock, walking
// the same expires_at index as Cleanup (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, s.sql.countExpired).Scan(&n); err != nil {
		return 0, wrapErr(ctx, "count expired", err)
	}
	return n, nil
}

// Close implements store.Store. Later calls fail with store.ErrClosed; the
// pool stays open, as it belongs to the caller.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeNotify()
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// keyHash decodes a store.HashKey string into the 32 bytes the primary key
// holds.
func keyHash(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("%w: %q", ErrInvalidKeyHash, s)
	}
	return b, nil
}

// row receives the record columns of a result.
type row struct {
	r          store.Record
	token      int64 // the uint64 token's bits; pgx refuses negative int8 into uint64
	clockToken *int64
	// leaseUntil is the lease_until column as read, which judge replaces
	// for an earlier version's row.
	leaseUntil time.Time
	// now is the server's clock when it read the row.
	now time.Time
}

// dest returns the scan destinations of columns and the server's time, in
// order.
func (x *row) dest() []any {
	r := &x.r
	return []any{&r.Scope, &r.Key, &r.Fingerprint, &r.Binding, (*string)(&r.State),
		&x.token, &r.Value, &r.RequestID, &r.CreatedAt, &r.UpdatedAt, &r.ExpiresAt, &x.leaseUntil,
		&x.clockToken, &x.now}
}

// legacy reports whether the row was written by an earlier version of the
// store, on its caller's clock: its reservation did not mark it as written
// on the server's (clock_token). Such a row's lease is judged by watching
// it, as stores without a clock do (store/internal/leasewatch): it is over
// only once this process has seen the very same token and lease_until for
// a whole lease, which a holder that still renews never lets happen,
// whatever its clock says. Its expiry stays judged by its expires_at,
// off by its writer's error: a record's lifetime is far longer than a
// lease, and nothing better is known of it.
func (x *row) legacy() bool { return x.clockToken == nil || *x.clockToken != x.token }

// record returns the scanned record, its times in UTC.
func (x *row) record(keyHash []byte) store.Record {
	r := x.r
	r.KeyHash = hex.EncodeToString(keyHash)
	r.Token = uint64(x.token)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	r.ExpiresAt, r.LeaseUntil = r.ExpiresAt.UTC(), x.leaseUntil.UTC()
	return r
}

// retryable reports errors after which re-running a whole statement is
// harmless: the server rolled it back (serialization failure, deadlock),
// which READ COMMITTED sessions see only under an unusual
// default_transaction_isolation.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// wrapErr gives err the operation's name and, when the context ended while
// the driver was busy, makes sure errors.Is finds the context's error.
func wrapErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("postgres store: %s: %w: %w", op, ctxErr, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") { // undefined_table, undefined_column
		return fmt.Errorf("postgres store: %s: %w (run postgres.Migrate or `idem migrate`)", op, err)
	}
	return fmt.Errorf("postgres store: %s: %w", op, err)
}
