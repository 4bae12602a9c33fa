package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idem-dev/idem/store"
)

// ErrNotReleasable: Engine.Release was asked to free a key whose record
// must stay: it succeeded, it failed with a known outcome that the policy
// keeps, or its holder is alive and renewing its lease (HTTP 409).
var ErrNotReleasable = errors.New("idem: the key's record cannot be released")

// Release frees key in scope for an operator, so that the next call runs
// the operation: the way out of a key failed with an unknown outcome
// (ConflictOutcomeUnknown) once someone has checked what became of the
// first call, or of an in_progress key whose holder stopped renewing its
// lease. It returns an error matching store.ErrNotFound when there is no
// live record, ErrNotReleasable for any other record (a succeeded record
// is never released), ErrLeaseLost when the record changed while it was
// being released (read it again), ErrInvalidKey and ErrStoreUnavailable as
// Do does. Waiters for the key are woken.
//
// A stale holder is not always dead. If it is alive and finishes before
// any new call reserves the released key, it finds its record gone and
// writes its outcome back (see WithOnRecordLost): the next call replays
// that outcome and the key does not run twice, which is what idem exists
// to prevent. A call that reserved the key first runs it again, and the
// holder's outcome is dropped.
func (e *Engine) Release(ctx context.Context, scope, key string) error {
	key, err := ValidateKey(key, e.policy.MaxKeyBytes)
	if err != nil {
		return err
	}
	c := Call{Scope: scope, Key: key}
	rec, id, err := e.find(ctx, c)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("idem: release: %w", err)
	case err != nil:
		return err
	case !owns(Call{Scope: id.scope, Key: key}, rec):
		return &StoreError{Op: "get", Err: fmt.Errorf("key_hash %s: %w", e.redact.Key(id.scope, key), store.ErrForeignRecord)}
	}
	scope, keyHash := id.scope, id.keyHash
	view := RecordOf(rec)
	if !view.Releasable() {
		what := string(rec.State)
		switch {
		case rec.State == store.InProgress:
			what = "in_progress, its holder renewing its lease"
		case rec.State == store.Failed:
			what = "failed with a known outcome"
		}
		return fmt.Errorf("%w: key_hash %s is %s", ErrNotReleasable, e.redact.Key(scope, key), what)
	}
	// The token fences the release: if the stale holder completes, or the
	// key is taken over, in between, the token no longer holds the record
	// and nothing is deleted. Stores never release a succeeded record.
	err = e.store.Release(ctx, store.Fence{KeyHash: keyHash, Scope: scope, Token: rec.Token})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return fmt.Errorf("idem: release: key_hash %s changed while releasing: %w", e.redact.Key(scope, key), ErrLeaseLost)
	case err != nil:
		return &StoreError{Op: "release", Err: err}
	}
	e.logger.Info("idem: key released by an operator", e.logAttrs(slog.LevelInfo, scope, key,
		"state", string(rec.State), "outcome_unknown", view.OutcomeUnknown, "request_id", rec.RequestID)...)
	e.announce(ctx, scope, keyHash, nil)
	return nil
}
