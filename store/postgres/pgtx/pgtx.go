package pgtx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
)

// ErrNoHold: Tx was called from outside an operation run by an engine over
// a pgtx Store (or under OnStoreErrorFailOpen, where no record protects the
// call, so that there is no completion to commit with).
// Behind idemhttp, a request that sent no Idempotency-Key on a route whose
// key is optional reaches its handler without one.
var ErrNoHold = errors.New("pgtx: no reservation in the context: the request sent no Idempotency-Key (the route's key is optional), or Tx was called outside an operation run by idem.Engine.Do over a pgtx.Store")

// ErrNotPgtx: Do or DoSteps got an engine that does not run over their
// Store.
var ErrNotPgtx = errors.New("pgtx: the engine does not run over this *pgtx.Store (idem.New(s, ...))")

// Store is a PostgreSQL store whose holders can complete their record in
// their own transaction. Give it to idem.New like any store: every method
// but Complete and Release is the postgres.Store's. An operation that calls
// Tx gets a transaction; the engine's completion of the record then runs
// inside it and commits it, and a release (the operation failed, panicked,
// or the policy releases failures) rolls it back. An operation that never
// calls Tx is completed as by postgres.Store.
type Store struct {
	*postgres.Store

	mu      sync.Mutex
	pending map[uint64]*pending // by fencing token; guarded by mu

	// beforeCommit, when set (by tests), runs between the completion's
	// UPDATE and the COMMIT.
	beforeCommit func()
	// stalled, when set (by tests), keeps renewals from reaching the
	// server, as a stopped process's never do.
	stalled atomic.Bool
}

var _ store.Store = (*Store)(nil)

// pending is the open transaction of one reservation.
type pending struct {
	tx pgx.Tx
}

// New returns a Store over s. The pool of s must have a connection for
// every operation running at once plus a few for reservations and lease
// renewals: an operation's transaction keeps its connection until the
// engine completes the record.
func New(s *postgres.Store) *Store {
	return &Store{Store: s, pending: make(map[uint64]*pending)}
}

// Tx returns the transaction of the operation that ctx belongs to, and
// begins it on first use. Its writes commit together with the record's
// completion, or not at all: if the process dies, the operation fails, or
// its holder lost the key to another caller, they are rolled back. The
// operation must not commit or roll it back itself.
func (s *Store) Tx(ctx context.Context) (pgx.Tx, error) {
	h, ok := idem.HoldFrom(ctx)
	if !ok {
		return nil, ErrNoHold
	}
	s.mu.Lock()
	p := s.pending[h.Token]
	s.mu.Unlock()
	if p != nil {
		return p.tx, nil
	}
	// Not under s.mu: Begin may wait for a connection, which a holder
	// returns only once its Complete, which takes s.mu, has run.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgtx: begin: %w: %w", idem.ErrNotExecuted, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[h.Token]; p != nil { // the operation raced itself
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return p.tx, nil
	}
	s.pending[h.Token] = &pending{tx: tx}
	return tx, nil
}

// RenewTimeout bounds a lease renewal of a holder whose transaction is
// open (see Renew).
const RenewTimeout = time.Second

// Renew implements store.Store. For a holder whose transaction is open, it
// gives up after RenewTimeout: when every connection of the pool is held by
// a transaction that waits for this holder's row locks, waiting longer
// would deadlock (the engine finishes a renewal before it completes the
// record). A failed renewal is retried at the next tick; a lease that runs
// out meanwhile costs a takeover, never a double effect, because the
// completion is fenced.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	if s.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	s.mu.Lock()
	open := s.pending[f.Token] != nil
	s.mu.Unlock()
	if open {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RenewTimeout)
		defer cancel()
	}
	return s.Store.Renew(ctx, f, lease)
}

// take removes and returns the open transaction of token, if any.
func (s *Store) take(token uint64) *pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[token]
	delete(s.pending, token)
	return p
}

// Complete implements store.Store. When the holder has a transaction and
// succeeded, the completion is written in it and commits it; a holder that
// lost its lease gets store.ErrLeaseLost and its writes are rolled back. A
// failure is recorded after the transaction is rolled back.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	p := s.take(c.Token)
	if p != nil && c.State != store.Succeeded {
		// A failed operation's writes never commit; its failure is recorded
		// on its own, as the policy asked.
		_ = p.tx.Rollback(context.WithoutCancel(ctx))
		p = nil
		if idem.RecordOf(store.Record{State: c.State, Value: c.Value}).OutcomeUnknown {
			// An operation whose effects are its transaction (Tx's
			// contract) that panicked, or reported an unknown outcome,
			// before the commit did nothing: the rollback undid it. The
			// key is released, so that its retry runs, instead of
			// answering "it may have run" until the record expires.
			return s.Store.Release(ctx, c.Fence)
		}
	}
	if p == nil {
		return s.Store.Complete(ctx, c)
	}
	if err := s.CompleteTx(ctx, p.tx, c); err != nil {
		_ = p.tx.Rollback(context.WithoutCancel(ctx))
		if errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		return s.abandon(ctx, c.Fence, "complete", err)
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := p.tx.Commit(ctx); err != nil {
		return s.abandon(ctx, c.Fence, "commit", err)
	}
	return nil
}

// abandon ends a hold whose transaction failed. Its writes are gone, or, if
// only the COMMIT's reply was lost, committed together with the completion:
// a fenced release frees the key in the first case and is a no-op in the
// second. The error matches store.ErrLeaseLost, true either way, so that
// the engine does not retry a completion that has nothing left to commit,
// and finds out from the record which of the two happened. It matches
// idem.ErrNotExecuted too: should the record be gone, the transaction did
// not commit and nothing ran, so the engine must not write the outcome
// back as it does for a record a store failover lost.
func (s *Store) abandon(ctx context.Context, f store.Fence, op string, err error) error {
	rerr := s.Store.Release(context.WithoutCancel(ctx), f)
	if rerr != nil && !errors.Is(rerr, store.ErrLeaseLost) {
		return fmt.Errorf("pgtx: %s: %w; release: %w (%w, %w)", op, err, rerr, store.ErrLeaseLost, idem.ErrNotExecuted)
	}
	return fmt.Errorf("pgtx: %s: %w (%w, %w)", op, err, store.ErrLeaseLost, idem.ErrNotExecuted)
}

// Release implements store.Store; it rolls back the holder's transaction,
// if any, first.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	if p := s.take(f.Token); p != nil {
		_ = p.tx.Rollback(context.WithoutCancel(ctx))
	}
	return s.Store.Release(ctx, f)
}

// Func is an operation that writes in tx. Its writes commit together with
// its outcome.
type Func func(ctx context.Context, tx pgx.Tx) ([]byte, error)

// Do runs fn through eng, which must run over s (idem.New(s, ...)), at most once in
// effect per c's key: fn's writes in tx and the record's completion commit
// together. A caller that takes the key over after a holder died runs fn
// again, which is safe, because the dead holder's transaction left nothing
// behind. Results and errors are eng.Do's, but for a holder whose key
// another caller took over while fn ran: its error matches idem.ErrLeaseLost
// (and still wraps fn's own, often the canceled context's), and
// Result.NotRecorded is set, whatever fn returned.
func (s *Store) Do(ctx context.Context, eng *idem.Engine, c idem.Call, fn Func) (idem.Result, error) {
	return s.do(ctx, eng, c, func(ctx context.Context, s *Store) ([]byte, error) {
		tx, err := s.Tx(ctx)
		if err != nil {
			return nil, err
		}
		return fn(ctx, tx)
	})
}

// do runs fn through eng, which runs over s, and makes sure that the
// transaction fn may have begun does not outlive the call.
func (s *Store) do(ctx context.Context, eng *idem.Engine, c idem.Call, fn func(context.Context, *Store) ([]byte, error)) (idem.Result, error) {
	if !eng.Uses(s) {
		return idem.Result{}, ErrNotPgtx
	}
	var token uint64
	defer func() {
		// The engine ends every reservation with Complete or Release, which
		// end the transaction; this only guards against a path that did not.
		if p := s.take(token); p != nil {
			_ = p.tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	// A panic rolls the transaction back, so nothing of the operation
	// remains: unlike a panic under a plain engine, whose effects are
	// unknown, it releases the key (the engine records an unknown outcome
	// otherwise), and then goes on up the stack.
	var (
		panicked any
		opCtx    context.Context
	)
	res, err := eng.Do(ctx, c, func(ctx context.Context) (v []byte, err error) {
		h, _ := idem.HoldFrom(ctx)
		token, opCtx = h.Token, ctx
		defer func() {
			if p := recover(); p != nil {
				panicked = p
				err = fmt.Errorf("pgtx: the operation panicked and its transaction rolled back: %w", idem.ErrNotExecuted)
			}
		}()
		return fn(ctx, s)
	})
	if panicked != nil {
		panic(panicked)
	}
	if err != nil && opCtx != nil && !errors.Is(err, idem.ErrLeaseLost) && errors.Is(context.Cause(opCtx), idem.ErrLeaseLost) {
		// A renewal found the key taken over and canceled the operation,
		// which then failed with its context's error. The engine released
		// the key for it (a no-op: it is another holder's now) and hands
		// that error back as a failure; the caller must learn instead that
		// someone else has the key.
		res.NotRecorded = true
		err = fmt.Errorf("pgtx: another caller took the key over: %w (the operation: %w)", idem.ErrLeaseLost, err)
	}
	return res, err
}
