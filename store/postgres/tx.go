package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/store"
)

// This file lets an operation's own transaction carry the record's writes
// (package pgtx): the completion commits with the operation's business
// writes, or neither does.

// Pool returns the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns the records table's name, schema-qualified and quoted.
func (s *Store) Table() string { return s.opts.qualified() }

// CompleteTx is Complete run inside tx: the record's completion commits
// with tx, or not at all. It is fenced like Complete, and it returns
// store.ErrLeaseLost when c.Token no longer holds the record; the caller
// must then roll tx back. Its UPDATE locks the record's row until tx ends,
// so a caller taking the key over meanwhile waits for tx and then finds the
// record completed.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, c store.Completion) error {
	if !c.State.Valid() || c.State == store.InProgress {
		return fmt.Errorf("postgres store: complete: state %q is not succeeded or failed", c.State)
	}
	return s.fencedTx(ctx, tx, "complete", s.sql.complete, c.Fence, string(c.State), c.Value, micros(c.TTL))
}

// FenceTx checks, inside tx, that f.Token still holds its in_progress
// record, and locks the record's row until tx ends, so that nobody can take
// the key over before tx commits. It returns store.ErrLeaseLost when the
// token no longer holds the record. A multi-step operation calls it before
// committing each step.
func (s *Store) FenceTx(ctx context.Context, tx pgx.Tx, f store.Fence) error {
	return s.fencedTx(ctx, tx, "fence", `SELECT FROM `+s.opts.qualified()+
		` WHERE key_hash = $1 AND token = $2 AND state = 'in_progress' FOR NO KEY UPDATE`, f)
}

func (s *Store) fencedTx(ctx context.Context, tx pgx.Tx, op, sql string, f store.Fence, args ...any) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	kh, err := keyHash(f.KeyHash)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, sql, append([]any{kh, int64(f.Token)}, args...)...)
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrLeaseLost
	}
	return nil
}
