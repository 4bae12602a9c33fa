package store

import "context"

// Notifier is an optional capability of a Store: it carries word that a
// record left in_progress (it was completed or released) to callers waiting
// for it in other processes, so that they need not poll. The engine
// subscribes a caller that waits (Policy.Wait) for a running call with the
// same key, and notifies after it ended a call on such a policy.
//
// Notifications are a hint, never the truth: a waiter woken re-reads the
// record, and a notification may be lost (a broken connection, a listener
// that was still connecting), so waiters keep polling, less often, as a
// safety net. A Notifier must therefore never block a writer for long and
// may drop a notification rather than queue it without bound.
type Notifier interface {
	// Notify tells the subscribers of keyHash in scope, in every process
	// sharing the backend, that its record left in_progress.
	Notify(ctx context.Context, scope, keyHash string) error

	// Subscribe returns a channel that is closed when a Notify for keyHash
	// made after Subscribe returned reaches this process, and a function
	// that ends the subscription (call it once, whether or not the channel
	// was closed). It returns an error, and no subscription, when the store
	// cannot deliver notifications now (its listener is not connected);
	// the caller then polls.
	Subscribe(ctx context.Context, scope, keyHash string) (<-chan struct{}, func(), error)
}

// RecordNotifier is a Notifier that can carry the record a call ended with
// to the waiters it wakes, so that a waiter in another process replays it
// without reading the store first: one round trip less between the
// holder's completion and the waiter's answer. The record is a hint like
// the notification itself: a store that cannot carry it (too large for
// its channel) sends a plain notification, and a waiter woken without one
// reads the store.
//
// The record crosses the store's channel as the engine sees it, before any
// wrapper between the engine and the store transforms it: scope, raw key,
// request ID and stored outcome in the clear. A backend must therefore
// never be a RecordNotifier itself when whoever may listen on its channel
// is not trusted with records (PostgreSQL lets every role LISTEN on every
// channel, whatever its table privileges): such a backend is a
// RecordCarrier, and a wrapper that seals records (package seal's) is the
// RecordNotifier over it, carrying sealed records. A wrapper that changes
// records must implement Notifier itself, so that NotifierOf stops at it.
type RecordNotifier interface {
	Notifier
	// NotifyRecord is Notify for rec.Scope and rec.KeyHash, carrying rec,
	// which left in_progress, when it fits.
	NotifyRecord(ctx context.Context, rec Record) error
	// SubscribeRecord is Subscribe, plus a function that returns, once
	// the channel is closed, the record the waking notification carried,
	// or nil when it carried none (a plain Notify, a reconnection, Close).
	SubscribeRecord(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *Record, func(), error)
}

// RecordCarrier is a Notifier whose channel can carry a record with a
// notification, as it is given, to anyone who may listen. The engine never
// hands it one (it is no RecordNotifier): only a wrapper that makes
// records unreadable first (package seal) carries them, so that no
// notification holds a key, scope or outcome in the clear.
type RecordCarrier interface {
	Notifier
	// CarryRecord is Notify for rec.Scope and rec.KeyHash, carrying rec,
	// which left in_progress, when it fits.
	CarryRecord(ctx context.Context, rec Record) error
	// SubscribeCarried is Subscribe, plus a function that returns, once
	// the channel is closed, the record the waking notification carried,
	// or nil when it carried none.
	SubscribeCarried(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *Record, func(), error)
}

// NotifierOf returns s's Notifier: s itself, or the Notifier of the store
// it wraps, found through an Unwrap() Store method, so that a wrapper (one
// that encrypts records, say) need not pass the capability on by hand.
// Going round a wrapper is safe for notifications: they carry only the key
// hash the engine chose, and both ends go round it alike; a RecordNotifier
// also carries the engine's record, which a wrapper that changes records
// must keep to itself by being a Notifier (see RecordNotifier), and which
// a RecordCarrier is never given by the engine.
func NotifierOf(s Store) (Notifier, bool) {
	for s != nil {
		if n, ok := s.(Notifier); ok {
			return n, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return nil, false
		}
		s = u.Unwrap()
	}
	return nil, false
}
