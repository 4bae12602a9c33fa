package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idem-dev/idem/store"
)

// decide says what an existing record means for call c, which did not
// reserve the key: the record's outcome replayed, or the conflict that
// keeps c from running. ended is false while the record is in progress:
// the caller then waits, or answers inProgress. Do and Peek both ask it,
// and so does every other path that answers for a key (the middleware's,
// when an outcome could not be recorded), so that a record means the same
// on every path.
//
// The order matters: a key bound to another action or request is a
// conflict whatever the record's state, so that a client reusing a key by
// mistake learns it at once, not after the first call ends.
func decide(c Call, ex store.Record) (res Result, err error, ended bool) {
	switch {
	case ex.Binding != c.Binding:
		return Result{}, &ConflictError{Type: ConflictKeyReused, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex)}, true
	case ex.Fingerprint != c.Fingerprint:
		return Result{}, &ConflictError{Type: ConflictPayloadMismatch, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex)}, true
	case ex.State == store.Succeeded:
		return replay(ex, false), nil, true
	case ex.State == store.Failed:
		if failure, ok := outcomeUnknown(ex); ok {
			view := RecordOf(ex)
			ex.Value = failure
			return replay(ex, false), &ConflictError{Type: ConflictOutcomeUnknown, Scope: c.Scope, Key: c.Key, Record: view}, true
		}
		return replay(ex, false), &ConflictError{Type: ConflictPreviousFailure, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex)}, true
	}
	return Result{}, nil, false
}

// inProgress is the conflict of a call whose key is held by a running
// call (or, when ex.Stale(), by one whose lease is over).
func inProgress(c Call, ex store.Record) *ConflictError {
	return &ConflictError{Type: ConflictInProgress, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex), Stale: ex.Stale()}
}

// Peek returns what a retry of c would get now, without running anything
// and without reserving the key: the stored outcome replayed, or the error
// Do would return for it (a *ConflictError; ErrInProgress for a running
// call, at once, whatever Policy.Wait says). It returns an error matching
// store.ErrNotFound when the key has no live record, so that a retry would
// run the operation. Paths that must answer for a key without running it
// use Peek, so that they answer as Do does.
func (e *Engine) Peek(ctx context.Context, c Call) (Result, error) {
	key, err := ValidateKey(c.Key, e.policy.MaxKeyBytes)
	if err != nil {
		return Result{}, err
	}
	c.Key = key
	keyHash := e.hashKey(c.Scope, key)
	ex, ok := e.keptRecord(keyHash)
	if !ok {
		if ex, err = e.store.Get(ctx, c.Scope, keyHash); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return Result{}, fmt.Errorf("idem: key %q: %w", key, err)
			}
			return Result{}, &StoreError{Op: "get", Err: err}
		}
	}
	if res, err, ended := decide(c, ex); ended {
		return res, err
	}
	return Result{}, inProgress(c, ex)
}
