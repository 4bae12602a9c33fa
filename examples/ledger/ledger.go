package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrInsufficientFunds: the source account cannot cover the transfer.
var ErrInsufficientFunds = errors.New("ledger: insufficient funds")

// ErrNoAccount: an account of the transfer does not exist.
var ErrNoAccount = errors.New("ledger: no such account")

// Ledger is the business side: accounts and the transfers between them, in
// one PostgreSQL schema. It knows nothing of idempotency keys; it writes in
// the transaction it is given.
type Ledger struct {
	Schema string
}

func (l Ledger) table(name string) string { return pgx.Identifier{l.Schema, name}.Sanitize() }

// Migrate creates the ledger's tables.
func (l Ledger) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{l.Schema}.Sanitize()+`;
CREATE TABLE IF NOT EXISTS `+l.table("accounts")+` (
	id            text   PRIMARY KEY,
	balance_cents bigint NOT NULL CHECK (balance_cents >= 0)
);
-- record_id is the idempotency record's ID. It is deliberately not UNIQUE:
-- exactly-once comes from committing the transfer with its record, and the
-- tests count these rows to prove it.
CREATE TABLE IF NOT EXISTS `+l.table("transfers")+` (
	id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
	record_id    uuid        NOT NULL,
	from_account text        NOT NULL,
	to_account   text        NOT NULL,
	amount_cents bigint      NOT NULL CHECK (amount_cents > 0),
	created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS transfers_record_id_idx ON `+l.table("transfers")+` (record_id);`)
	return err
}

// Open creates an account with a balance, or resets its balance.
func (l Ledger) Open(ctx context.Context, pool *pgxpool.Pool, id string, balanceCents int64) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+l.table("accounts")+` (id, balance_cents) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET balance_cents = excluded.balance_cents`, id, balanceCents)
	return err
}

// TransferRequest is what a client asks for.
type TransferRequest struct {
	From        string `json:"from"`
	To          string `json:"to"`
	AmountCents int64  `json:"amount_cents"`
}

// Transfer is a transfer made.
type Transfer struct {
	ID string `json:"id"`
	TransferRequest
}

// Transfer moves money in tx and records the transfer under recordID.
func (l Ledger) Transfer(ctx context.Context, tx pgx.Tx, recordID string, req TransferRequest) (Transfer, error) {
	if req.AmountCents <= 0 || req.From == req.To {
		return Transfer{}, fmt.Errorf("ledger: a transfer moves a positive amount between two accounts")
	}
	// Lock both accounts in one order, so that two transfers between the
	// same accounts in opposite directions cannot deadlock.
	rows, err := tx.Query(ctx, `SELECT id, balance_cents FROM `+l.table("accounts")+`
WHERE id IN ($1, $2) ORDER BY id FOR UPDATE`, req.From, req.To)
	if err != nil {
		return Transfer{}, err
	}
	balances := map[string]int64{}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return Transfer{}, err
		}
		balances[id] = b
	}
	if err := rows.Err(); err != nil {
		return Transfer{}, err
	}
	if len(balances) != 2 {
		return Transfer{}, ErrNoAccount
	}
	if balances[req.From] < req.AmountCents {
		return Transfer{}, ErrInsufficientFunds
	}
	if _, err := tx.Exec(ctx, `UPDATE `+l.table("accounts")+` SET balance_cents = balance_cents + CASE id WHEN $1 THEN -$3::bigint ELSE $3::bigint END
WHERE id IN ($1, $2)`, req.From, req.To, req.AmountCents); err != nil {
		return Transfer{}, err
	}
	t := Transfer{TransferRequest: req}
	err = tx.QueryRow(ctx, `INSERT INTO `+l.table("transfers")+` (record_id, from_account, to_account, amount_cents)
VALUES ($1, $2, $3, $4) RETURNING id`, recordID, req.From, req.To, req.AmountCents).Scan(&t.ID)
	return t, err
}

// Balance returns an account's balance.
func (l Ledger) Balance(ctx context.Context, pool *pgxpool.Pool, id string) (int64, error) {
	var b int64
	err := pool.QueryRow(ctx, `SELECT balance_cents FROM `+l.table("accounts")+` WHERE id = $1`, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNoAccount
	}
	return b, err
}
