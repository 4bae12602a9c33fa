package trigger

import (
	"context"
	"errors"
	"time"

	"github.com/idem-dev/idem"
)

// ErrAlreadyStarted is returned by Start when the ID was started before (or
// is being started right now). Nothing ran; log it and move on. The error
// is an *AlreadyStartedError, which says whether the first start is still
// running.
var ErrAlreadyStarted = errors.New("trigger: already started")

// AlreadyStartedError is the error Start returns for an ID that was
// started before. It matches ErrAlreadyStarted.
//
// A broker consumer must not acknowledge an event whose first start is
// still Running: if that holder was killed, the event would be lost. It
// asks for redelivery after LeaseLeft instead, when a start takes the ID
// over from a dead holder (under the engine's default OnStaleRetry).
type AlreadyStartedError struct {
	ID string
	// Running: another holder has the ID in progress; its lease runs
	// LeaseLeft more unless renewed, as the store judged when it read the
	// record. False: the first start finished, and its outcome is
	// recorded.
	Running   bool
	LeaseLeft time.Duration
	// LeaseUntil is when that lease ends on the store's clock, for
	// display: the store's clock need not be this machine's, so waits are
	// counted from LeaseLeft.
	LeaseUntil time.Time
	// scope and redact print ID in Error as the engine prints keys (its
	// Redactor): an event ID is what the event's publisher put in it, and
	// error texts are logged (docs/ISOLATION.md).
	scope  string
	redact idem.Redactor
}

func (e *AlreadyStartedError) Error() string {
	printed := "key_hash " + e.redact.Key(e.scope, e.ID)
	if e.Running {
		return "trigger: already started (still running): " + printed
	}
	return "trigger: already started: " + printed
}

// Is reports whether target is ErrAlreadyStarted.
func (e *AlreadyStartedError) Is(target error) bool { return target == ErrAlreadyStarted }

// Starter starts work at most once per ID.
type Starter struct {
	// Engine keeps the IDs. Its policy decides how long an ID is remembered
	// (TTL) and what a failed start means: under OnFailureRelease (the
	// default) a start whose function failed did not happen and may be
	// retried; under OnFailureCache or OnFailureConflict it counts as
	// started.
	Engine *idem.Engine
	// Scope separates the IDs of unrelated starters sharing a store (a
	// namespace, a queue). Empty is a scope like any other.
	Scope string
}

// Start runs fn under id unless id was started before, in which case it
// returns ErrAlreadyStarted. fn's error is returned as it is.
func (s *Starter) Start(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	_, err := s.start(ctx, id, fn)
	return err
}

// outcome is what a start left behind, as a Runner needs to know it.
type outcome struct {
	// settled: the ID's outcome is recorded (it ran here or elsewhere and
	// finished, or its failure is recorded); it never needs another start.
	settled bool
	// running: another holder has the ID in progress, with its lease until
	// leaseUntil; if that holder died, a start after then runs it again.
	running   bool
	leaseLeft time.Duration // the holder's, when running
}

// already is the error of an id whose first start finished.
func (s *Starter) already(id string) *AlreadyStartedError {
	return &AlreadyStartedError{ID: id, scope: s.Scope, redact: s.Engine.Redactor()}
}

func (s *Starter) start(ctx context.Context, id string, fn func(ctx context.Context) error) (outcome, error) {
	res, err := s.Engine.Do(ctx, idem.Call{Scope: s.Scope, Key: id}, func(ctx context.Context) ([]byte, error) {
		return nil, fn(ctx)
	})
	var conflict *idem.ConflictError
	switch {
	case errors.As(err, &conflict) && errors.Is(err, idem.ErrInProgress):
		r := conflict.Record
		return outcome{running: true, leaseLeft: r.LeaseLeft}, &AlreadyStartedError{ID: id, Running: true, LeaseLeft: r.LeaseLeft, LeaseUntil: r.LeaseUntil, scope: s.Scope, redact: s.Engine.Redactor()}
	case errors.Is(err, idem.ErrPreviousFailure):
		return outcome{settled: true}, s.already(id)
	case errors.Is(err, idem.ErrLeaseLost):
		// fn ran, but another holder took the ID over and will record it.
		return outcome{running: true}, err
	case err != nil:
		// fn failed and the policy released the ID, or the store failed:
		// nothing is recorded.
		released := res.State == idem.Failed && s.Engine.Policy().OnFailure == idem.OnFailureRelease
		if res.State == idem.Failed && !released && !errors.Is(err, idem.ErrNotExecuted) && !errors.Is(err, idem.ErrStoreUnavailable) {
			return outcome{settled: true}, err
		}
		return outcome{}, err
	case res.Replayed:
		return outcome{settled: true}, s.already(id)
	}
	return outcome{settled: true}, nil
}
