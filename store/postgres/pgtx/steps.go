package pgtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
)

// StepsTable is the table, beside the records table, that keeps the
// recovery points of multi-step operations: Options.Table + StepsTable.
const StepsTable = postgres.StepsSuffix

// Migrate creates the recovery points table of the records table named by
// opts (which postgres.Migrate creates). It is idempotent.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts postgres.Options) error {
	opts = opts.WithDefaults()
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+stepsTable(opts)+` (
	record_id  uuid        PRIMARY KEY,
	step       int         NOT NULL,
	state      bytea,
	expires_at timestamptz NOT NULL
)`)
	if err != nil {
		return fmt.Errorf("pgtx: migrate: %w", err)
	}
	return nil
}

func stepsTable(opts postgres.Options) string {
	return pgx.Identifier{opts.Schema, opts.Table + StepsTable}.Sanitize()
}

// A Step is one atomic phase of a multi-step operation: its writes in tx
// commit together with its recovery point, or not at all.
//
// A call to another service (charging a card) belongs at the start of the
// step that records its result. If the process dies after the call but
// before the step commits, the step runs again, so the call must be
// idempotent itself: give it a key made of the record ID and the step's
// name (idem.HoldFrom(ctx).ID), sent as the remote API's idempotency key.
type Step struct {
	// Name identifies the step in logs and errors.
	Name string
	// Run does the step. state is what the previous step returned (nil for
	// the first); what Run returns is handed to the next step, and the
	// last step's is the operation's outcome.
	Run func(ctx context.Context, tx pgx.Tx, state []byte) ([]byte, error)
}

// DoSteps runs steps in order under c's key through eng, which must run
// over s (migrated by Migrate). Every step but the last commits in
// its own transaction with its recovery point; the last commits with the
// record's completion, and removes the recovery point. A caller that
// takes the key over after a holder died, or that retries after a step
// failed and the key was released, resumes after the last committed step
// with that step's state: no committed step runs twice.
//
// Recovery points live as long as the record would (Policy.TTL), so a key
// used again after its record expired starts over.
func (s *Store) DoSteps(ctx context.Context, eng *idem.Engine, c idem.Call, steps ...Step) (idem.Result, error) {
	if len(steps) == 0 {
		return idem.Result{}, errors.New("pgtx: no steps")
	}
	last := len(steps) - 1
	return s.do(ctx, eng, c, func(ctx context.Context, s *Store) ([]byte, error) {
		table := stepsTable(s.Options())
		h, _ := idem.HoldFrom(ctx)
		fence := store.Fence{KeyHash: h.KeyHash, Scope: h.Scope, Token: h.Token}
		next, state := 0, []byte(nil)
		err := s.Pool().QueryRow(ctx, `SELECT step, state FROM `+table+` WHERE record_id = $1 AND expires_at > $2`,
			h.ID, eng.Now()).Scan(&next, &state)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("pgtx: read recovery point: %w", err)
		}
		for i := next; i < last; i++ {
			state, err = s.runStep(ctx, eng, table, fence, h.ID, i, steps[i], state)
			if err != nil {
				return nil, err
			}
		}
		// The last step's transaction commits with the record's completion.
		final, err := s.Tx(ctx)
		if err != nil {
			return nil, err
		}
		v, err := steps[last].Run(ctx, final, state)
		if err != nil {
			return nil, fmt.Errorf("pgtx: step %q: %w", steps[last].Name, err)
		}
		if _, err := final.Exec(ctx, `DELETE FROM `+table+` WHERE record_id = $1`, h.ID); err != nil {
			return nil, fmt.Errorf("pgtx: remove recovery point: %w", err)
		}
		return v, nil
	})
}

// runStep runs step i in its own transaction, which commits the step's
// writes with its recovery point only while the holder still holds the key.
func (s *Store) runStep(ctx context.Context, eng *idem.Engine, table string, f store.Fence, id string, i int, step Step, state []byte) ([]byte, error) {
	var out []byte
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var err error
		if out, err = step.Run(ctx, tx, state); err != nil {
			return fmt.Errorf("pgtx: step %q: %w", step.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (record_id, step, state, expires_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (record_id) DO UPDATE SET step = excluded.step, state = excluded.state, expires_at = excluded.expires_at`,
			id, i+1, out, eng.Now().Add(eng.Policy().TTL)); err != nil {
			return fmt.Errorf("pgtx: step %q: recovery point: %w", step.Name, err)
		}
		// Last: the row lock it takes makes a caller taking the key over
		// wait until this step has committed, and then see it.
		if err := s.FenceTx(ctx, tx, f); err != nil {
			return fmt.Errorf("pgtx: step %q: %w", step.Name, err)
		}
		return nil
	})
	return out, err
}
