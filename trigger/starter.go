package trigger

import (
	"context"
	"errors"

	"github.com/idem-dev/idem"
)

// ErrAlreadyStarted is returned by Start when the ID was started before (or
// is being started right now). Nothing ran; log it and move on.
var ErrAlreadyStarted = errors.New("trigger: already started")

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
	res, err := s.Engine.Do(ctx, idem.Call{Scope: s.Scope, Key: id}, func(ctx context.Context) ([]byte, error) {
		return nil, fn(ctx)
	})
	switch {
	case errors.Is(err, idem.ErrInProgress), errors.Is(err, idem.ErrPreviousFailure):
		return ErrAlreadyStarted
	case err != nil:
		return err
	case res.Replayed:
		return ErrAlreadyStarted
	}
	return nil
}
