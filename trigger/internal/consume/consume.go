package consume

import (
	"context"
	"errors"
	"time"

	"github.com/idem-dev/idem/trigger"
)

// Action is what a consumer does with a message once its event was started
// (or found started).
type Action int

const (
	// Ack: the event is handled, here or by an earlier delivery, and its
	// outcome recorded: acknowledge the message.
	Ack Action = iota
	// Wait: another holder has the event in progress: redeliver the message
	// after Verdict.Delay, when that holder's lease has run out, so that if
	// the holder died the event runs again instead of being lost.
	Wait
	// Retry: the handler or the store failed and nothing is recorded:
	// redeliver the message after the consumer's retry delay.
	Retry
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Wait:
		return "wait"
	case Retry:
		return "retry"
	}
	return "unknown"
}

// Verdict is the fate of one message.
type Verdict struct {
	Action Action
	// Delay is, for Wait, how long until the holder's lease runs out.
	Delay time.Duration
	// Err is what the start returned: nil when the handler ran and its
	// outcome is recorded; for Ack otherwise, why nothing ran (it matches
	// trigger.ErrAlreadyStarted).
	Err error
}

// Run runs handler under trigger.EventKey(activityID, eventID) with s,
// unless the event was started before, and decides the message's fate.
//
// A handler that returns an error matching trigger.ErrAlreadyStarted (as
// pgtx.RunLog.Once does for an event whose effect committed before) has
// found its event handled: that counts as a success, and is recorded as
// one, so that later deliveries are acked without running. An
// *trigger.AlreadyStartedError that says the other start is still Running
// is kept as the handler's error: the message waits for that holder.
func Run(ctx context.Context, s *trigger.Starter, activityID, eventID string, handler func(ctx context.Context) error) Verdict {
	var handled error
	err := s.Start(ctx, trigger.EventKey(activityID, eventID), func(ctx context.Context) error {
		err := handler(ctx)
		if errors.Is(err, trigger.ErrAlreadyStarted) && !running(err) {
			handled = err
			return nil
		}
		return err
	})
	if err == nil && handled != nil {
		return Verdict{Action: Ack, Err: handled}
	}
	return Decide(err)
}

// Decide returns the fate of a message whose start (trigger.Starter.Start
// with the message's handler) returned err. Any error matching
// trigger.ErrAlreadyStarted means the event is handled, or held by another
// holder: it is acked, unless an *trigger.AlreadyStartedError says that
// holder is still running it, and then the message waits for its lease.
// Any other error is retried.
func Decide(err error) Verdict {
	var already *trigger.AlreadyStartedError
	switch {
	case err == nil:
		return Verdict{Action: Ack}
	case errors.As(err, &already) && already.Running:
		return Verdict{Action: Wait, Delay: HolderDelay(already), Err: err}
	case errors.Is(err, trigger.ErrAlreadyStarted):
		return Verdict{Action: Ack, Err: err}
	default:
		return Verdict{Action: Retry, Err: err}
	}
}

func running(err error) bool {
	var already *trigger.AlreadyStartedError
	return errors.As(err, &already) && already.Running
}

// Redeliveries of an event another holder has in progress come holderSlack
// after its lease runs out (so that a start then finds it over), and never
// sooner than minHolderDelay (a lease already over, or unknown).
const (
	holderSlack    = 50 * time.Millisecond
	minHolderDelay = 100 * time.Millisecond
)

// HolderDelay returns how long a message whose event a is held by another
// holder waits before it is delivered again: until the lease the store
// judged left (a.LeaseLeft) has passed, when a start takes the event over
// if that holder died (under the engine's default OnStaleRetry). It is the
// one place that turns the holder's lease into a delay, and it compares no
// two machines' clocks.
func HolderDelay(a *trigger.AlreadyStartedError) time.Duration {
	return max(a.LeaseLeft+holderSlack, minHolderDelay)
}
