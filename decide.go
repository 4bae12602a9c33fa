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
// The order matters: a record that is not c's own (another scope or key
// under its identity: planted, or damaged) answers nothing of its
// content; then a key bound to another action or request is a conflict
// whatever the record's state, so that a client reusing a key by mistake
// learns it at once, not after the first call ends.
func (s *shared) decide(c Call, ex store.Record) (res Result, err error, ended bool) {
	switch {
	case !owns(c, ex):
		// Without the key: this error is logged (a raw key must not be).
		return Result{}, &StoreError{Op: "get", Err: store.ErrForeignRecord}, true
	case ex.Binding != c.Binding:
		return Result{}, &ConflictError{Type: ConflictKeyReused, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex), redact: s.redact}, true
	case ex.Fingerprint != c.Fingerprint:
		return Result{}, &ConflictError{Type: ConflictPayloadMismatch, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex), redact: s.redact}, true
	case ex.State == store.Succeeded:
		return replay(ex, false), nil, true
	case ex.State == store.Failed:
		if failure, ok := outcomeUnknown(ex); ok {
			view := RecordOf(ex)
			ex.Value = failure
			return replay(ex, false), &ConflictError{Type: ConflictOutcomeUnknown, Scope: c.Scope, Key: c.Key, Record: view, redact: s.redact}, true
		}
		return replay(ex, false), &ConflictError{Type: ConflictPreviousFailure, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex), redact: s.redact}, true
	}
	return Result{}, nil, false
}

// owns reports whether ex is the record of c's scope and key. Identities
// frame the two (store.HashKey), so a record found under c's identity holds
// another pair only if it was planted there; a record found under a legacy
// identity may be another caller's, whose pair joined to the same string.
func owns(c Call, ex store.Record) bool { return ex.Scope == c.Scope && ex.Key == c.Key }

// inProgress is the conflict of a call whose key is held by a running
// call (or, when ex.Stale(), by one whose lease is over).
func (s *shared) inProgress(c Call, ex store.Record) *ConflictError {
	return &ConflictError{Type: ConflictInProgress, Scope: c.Scope, Key: c.Key, Record: RecordOf(ex), Stale: ex.Stale(), redact: s.redact}
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
	ex, ok := e.keptRecord(e.hashKey(c.Scope, key))
	if !ok {
		var id identity
		if ex, id, err = e.find(ctx, c); errors.Is(err, store.ErrNotFound) {
			return Result{}, fmt.Errorf("idem: %w", err)
		} else if err != nil {
			return Result{}, err
		}
		c.Scope = id.scope
	}
	if res, err, ended := e.decide(c, ex); ended {
		return res, err
	}
	return Result{}, e.inProgress(c, ex)
}

// find returns the live record of c's key (valid and trimmed): under its
// own identity, or, while legacy reads are on, c's own record where an
// earlier version of idem kept it (see former); with where it was found.
// The record found under c's own identity is returned whoever's it is,
// for the caller to refuse (decide, owns). It returns an error matching
// store.ErrNotFound when there is none, a *StoreError when the store
// fails.
func (e *Engine) find(ctx context.Context, c Call) (store.Record, identity, error) {
	return e.shared.find(ctx, e.store, c)
}

func (s *shared) find(ctx context.Context, st store.Store, c Call) (store.Record, identity, error) {
	own := identity{c.Scope, s.hashKey(c.Scope, c.Key)}
	ids := append([]identity{own}, s.formerIdentities(c, c.Key, own.keyHash)...)
	for _, id := range ids {
		rec, err := st.Get(ctx, id.scope, id.keyHash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return store.Record{}, id, &StoreError{Op: "get", Err: err}
		}
		as := c
		as.Scope = id.scope
		if id == own || owns(as, rec) {
			return rec, id, nil
		}
	}
	return store.Record{}, own, fmt.Errorf("key_hash %s: %w", s.redact.Key(c.Scope, c.Key), store.ErrNotFound)
}
