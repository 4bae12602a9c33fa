// Package pgtx makes an operation's effects on PostgreSQL happen exactly
// once per idempotency key: the operation's writes and the record of its
// outcome commit in one transaction.
//
// With a plain store, idem is at-least-once in one place: a holder that dies
// after its operation changed the database, but before its outcome was
// recorded, leaves a record that the next caller takes over once the lease
// runs out, and the operation runs again. Here the operation writes in a
// pgx.Tx that the record's completion commits, so the dead holder's writes
// were never committed, and running the operation again is safe.
//
//	s := pgtx.New(pgStore) // a *postgres.Store
//	eng := idem.New(s, idem.Policy{TTL: 24 * time.Hour})
//	res, err := s.Do(ctx, eng, call, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = $2`, amount, from)
//		...
//		return json.Marshal(transfer)
//	})
//
// The sequence is:
//
//  1. the reservation commits on its own, so concurrent callers see it and
//     wait or get ErrInProgress;
//  2. the operation writes in its transaction;
//  3. the completion, an UPDATE fenced by the holder's token, runs in the
//     same transaction, which then commits. A holder that lost its lease
//     updates no row, so the transaction rolls back and Do returns an error
//     matching idem.ErrLeaseLost; so does a holder whose lease renewal
//     found the key taken over, which cancels its operation's context,
//     whatever the operation then returned. The UPDATE locks the record's
//     row: a caller taking the key over between it and the COMMIT waits for
//     the COMMIT and then finds the record completed.
//
// An operation that fails, panics, or returns idem.ErrNotExecuted has its
// transaction rolled back; the record is then released or keeps the
// failure as the policy says. One whose outcome would be unknown (a panic,
// idem.ErrOutcomeUnknown) is released: its effects were its transaction,
// and the rollback undid them, so nothing ran and its retry runs. A
// COMMIT whose answer is lost ends exactly: the fenced release that
// follows finds the record completed if the COMMIT landed, and frees the
// key if it did not.
//
// # Behind the HTTP middleware
//
// Handlers behind idemhttp take part with Store.Tx, which returns the
// transaction of the call their request context belongs to; the
// middleware's engine must be over the same *Store:
//
//	s := pgtx.New(pgStore)
//	eng := idem.New(s, idem.Policy{})
//	mux.Handle("POST /orders", idemhttp.Middleware(eng, idemhttp.Options{...})(orders))
//
//	func orders(w http.ResponseWriter, r *http.Request) {
//		tx, err := s.Tx(r.Context()) // ErrNoHold: the request sent no key
//		...
//		tx.Exec(r.Context(), `INSERT INTO orders ...`)
//		w.WriteHeader(http.StatusCreated) // the row and the record commit together
//	}
//
// examples/ledger is a runnable service built this way. A request without
// a key on a route whose key is optional reaches its handler with no
// reservation, and Tx returns ErrNoHold saying so: make the route's key
// required (idemhttp.KeyRequired) when the handler always needs one.
//
// # Multi-step operations
//
// An operation that mixes database writes with calls to other services
// (charge a card, then record the charge) runs as Steps, each an atomic
// phase that commits its writes with a recovery point; a caller that takes
// the key over, or retries after a failure, resumes after the last
// committed step (Store.DoSteps).
//
// # Event consumers
//
// A consumer that is handed the same event twice (a broker's redelivery)
// records "event handled" in the transaction that handles it: RunLog.Once,
// with the trigger package's IDs. No idempotency record is needed there.
// The consumers of trigger/nats and trigger/amqp ack a delivery whose
// handler returns Once's trigger.ErrAlreadyStarted: its event was handled.
//
// # Where PostgreSQL is not the store
//
// Stores without transactions (S3) cannot commit the outcome with the work.
// There the operation names its own writes by idem.RecordID (the same for
// every holder of a key) and makes them conditional, such as an S3 object
// created with If-None-Match: *; see package store/s3.
package pgtx
