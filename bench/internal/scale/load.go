package scale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/store"
)

// A loader fills a store. Live records are reservations (in_progress, no
// stored response) that expire in 24 hours, with the keys LiveKey(i).
type loader interface {
	// live writes the live records from..to-1.
	live(ctx context.Context, from, to int) error
	// expired writes n records that have already expired.
	expired(ctx context.Context, n int) error
	close()
}

// storeLoader writes through the store's own Reserve, 512 at a time so
// that the embedded store groups many commits per sync and Redis gets
// many calls per round trip.
type storeLoader struct {
	st    store.Store
	batch atomic.Int64
	// cleanup, when set, frees what the run left in a shared server.
	cleanup func()
}

func (l *storeLoader) close() {
	if l.cleanup != nil {
		l.cleanup()
	}
}

func (l *storeLoader) live(ctx context.Context, from, to int) error {
	return l.each(ctx, from, to, func(i int) store.ReserveRequest {
		return record(LiveKey(i), 24*time.Hour)
	})
}

func (l *storeLoader) expired(ctx context.Context, n int) error {
	b := l.batch.Add(1)
	// A millisecond to live: expired long before the loading ends.
	return l.each(ctx, 0, n, func(i int) store.ReserveRequest {
		return record(fmt.Sprintf("expired-%d-%d", b, i), time.Millisecond)
	})
}

func (l *storeLoader) each(ctx context.Context, from, to int, req func(i int) store.ReserveRequest) error {
	const workers = 512
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	next.Store(int64(from))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to || ctx.Err() != nil {
					return
				}
				res, err := l.st.Reserve(ctx, req(i))
				if err == nil && !res.Acquired {
					err = fmt.Errorf("record %d exists already", i)
				}
				if err != nil {
					errOnce.Do(func() { first = err })
					next.Store(int64(to))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func openFile(ctx context.Context, dir string) (*dsn.Opened, loader, error) {
	st, err := dsn.Open(ctx, "file:"+dir, dsn.Options{})
	if err != nil {
		return nil, nil, err
	}
	return st, &storeLoader{st: st}, nil
}

func openRedis(ctx context.Context, url string) (*dsn.Opened, loader, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	flush := func() error {
		c := redis.NewClient(opts)
		defer c.Close()
		return c.FlushDB(context.Background()).Err()
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	st, err := dsn.Open(ctx, url, dsn.Options{})
	if err != nil {
		return nil, nil, err
	}
	// A million records are a few hundred MB of the shared Redis's memory.
	return st, &storeLoader{st: st, cleanup: func() { _ = flush() }}, nil
}

// pgLoader writes with INSERT ... SELECT over generate_series, in the
// records table's own layout: loading 10^7 rows through Reserve would take
// most of an hour.
type pgLoader struct {
	conn   *pgx.Conn
	schema string
	table  string
	batch  int
}

func openPostgres(ctx context.Context, idemDSN string) (*dsn.Opened, loader, error) {
	d, err := dsn.Parse(idemDSN)
	if err != nil {
		return nil, nil, err
	}
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return nil, nil, err
	}
	schema := d.Params["schema"]
	if schema == "" || schema == "public" {
		conn.Close(ctx)
		return nil, nil, fmt.Errorf("the scale runs drop their schema: give them one of their own (idem_schema=...), not %q", schema)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		conn.Close(ctx)
		return nil, nil, err
	}
	st, err := dsn.Open(ctx, idemDSN, dsn.Options{Migrate: true})
	if err != nil {
		conn.Close(ctx)
		return nil, nil, err
	}
	return st, &pgLoader{conn: conn, schema: pgx.Identifier{schema}.Sanitize(), table: pgx.Identifier{schema, "idem_records"}.Sanitize()}, nil
}

// close drops the run's schema: 10^7 rows are about 3 GB of disk.
func (l *pgLoader) close() {
	ctx := context.Background()
	_, _ = l.conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+l.schema+" CASCADE")
	l.conn.Close(ctx)
}

// insert writes the rows prefix+i for i in from..to-1, expiring at
// now() + expires, a million rows per statement.
func (l *pgLoader) insert(ctx context.Context, prefix string, from, to int, expires string) error {
	const chunk = 1_000_000
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		_, err := l.conn.Exec(ctx, `INSERT INTO `+l.table+` (key_hash, scope, key, fingerprint, binding,
	state, token, value, request_id, created_at, updated_at, expires_at, lease_until)
SELECT sha256(convert_to($1 || ':' || $2 || i, 'UTF8')), $1, $2 || i, 'fp', 'POST /charges',
	'in_progress', i, NULL, 'req-' || $2 || i, now(), now(), now() + $5::interval, now() + $5::interval
FROM generate_series($3::bigint, $4::bigint - 1) AS i`, Scope, prefix, lo, hi, expires)
		if err != nil {
			return err
		}
	}
	// Autovacuum would analyze the table after a while; the measurement
	// that follows should not depend on when.
	_, err := l.conn.Exec(ctx, "ANALYZE "+l.table)
	return err
}

func (l *pgLoader) live(ctx context.Context, from, to int) error {
	return l.insert(ctx, "live-", from, to, "24 hours")
}

func (l *pgLoader) expired(ctx context.Context, n int) error {
	l.batch++
	return l.insert(ctx, fmt.Sprintf("expired-%d-", l.batch), 0, n, "-1 minute")
}
