package pgtx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/trigger"
)

// Beginner begins transactions: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (whose Begin makes a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RunLog is an event consumer's record of the events it handled, kept in
// the consumer's own database and written in the transaction that handles
// the event: the event's effects and its "handled" mark commit together,
// so a redelivered event, or one handled by two consumers at once, has its
// effects once. Its table has one row per handled ID.
type RunLog struct {
	// Table is the run log's table, schema-qualified if need be; Create
	// makes it.
	Table pgx.Identifier
}

// Create creates the run log's table if it does not exist.
func (l RunLog) Create(ctx context.Context, db Beginner) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+l.Table.Sanitize()+` (
	run_id     text        PRIMARY KEY,
	handled_at timestamptz NOT NULL DEFAULT now()
)`)
		return err
	})
}

// Once runs fn in a transaction of db that also records id in the run log,
// unless id is there already: then fn does not run and Once returns
// trigger.ErrAlreadyStarted. Use the trigger package's deterministic IDs
// (trigger.EventKey, trigger.SlotKey). fn's writes and the mark commit
// together: if fn fails or the process dies, neither remains and the next
// delivery runs fn. A concurrent delivery of the same ID waits for this one
// on the run log's row lock, then finds the ID handled (or, if this one
// rolled back, handles it).
func (l RunLog) Once(ctx context.Context, db Beginner, id string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO `+l.Table.Sanitize()+` (run_id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
		if err != nil {
			return fmt.Errorf("pgtx: run log: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return trigger.ErrAlreadyStarted
		}
		return fn(ctx, tx)
	})
}
