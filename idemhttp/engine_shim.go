package idemhttp

// Placeholders for the engine's side of the outcome-unknown contract, until
// the engine branch lands; deleted at the merge.

import (
	"context"
	"errors"
	"time"

	"github.com/idem-dev/idem"
)

var errOutcomeUnknown = errors.New("idem: the outcome of the operation is unknown")

const conflictOutcomeUnknown idem.ConflictType = "outcome_unknown"

func tokenFromContext(ctx context.Context) (uint64, bool) { return 0, false }

func retryAfter(ce *idem.ConflictError, now time.Time) time.Duration {
	if ce.Type != idem.ConflictInProgress {
		return 0
	}
	d := ce.Record.LeaseUntil.Sub(now)
	if d < time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}
