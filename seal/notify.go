package seal

import (
	"context"
	"errors"

	"github.com/idem-dev/idem/store"
)

// notifyingStore is the seal over a backend that is a store.Notifier
// (PostgreSQL LISTEN/NOTIFY, Redis pub/sub): waiters in other processes are
// woken through it, under the sealed identity rather than the engine's
// unkeyed key hash, which would otherwise cross the wire in the clear.
type notifyingStore struct {
	*Store
	n store.Notifier
}

var _ store.Notifier = (*notifyingStore)(nil)

// Notify tells the waiters of the key under every secret's identity, so
// that during a rotation a waiter whose gateway has the other secret first
// is woken too.
func (s *notifyingStore) Notify(ctx context.Context, scope, keyHash string) error {
	var errs []error
	for _, id := range s.identities(scope, keyHash) {
		if err := s.n.Notify(ctx, id.scope, id.keyHash); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Subscribe waits for a notification under the primary secret's identity.
func (s *notifyingStore) Subscribe(ctx context.Context, scope, keyHash string) (<-chan struct{}, func(), error) {
	id := s.identity(s.ring.keys[0], scope, keyHash)
	return s.n.Subscribe(ctx, id.scope, id.keyHash)
}

// carryingStore is the seal over a backend whose notifications can carry
// a record (store.RecordCarrier, PostgreSQL's): it hands the backend the
// record sealed as it is stored, so that a waiter in another process
// replays it without reading the store, and no listener on the channel,
// which the backend may not restrict, reads anything but sealed fields.
type carryingStore struct {
	notifyingStore
	c store.RecordCarrier
}

var _ store.RecordNotifier = (*carryingStore)(nil)

// NotifyRecord carries rec sealed under the primary secret's identity, and
// a plain notification under every other secret's: a waiter whose gateway
// has another secret first reads the store.
func (s *carryingStore) NotifyRecord(ctx context.Context, rec store.Record) error {
	ids := s.identities(rec.Scope, rec.KeyHash)
	errs := []error{s.c.CarryRecord(ctx, s.seal(rec, ids[0]))}
	for _, id := range ids[1:] {
		errs = append(errs, s.n.Notify(ctx, id.scope, id.keyHash))
	}
	return errors.Join(errs...)
}

// SubscribeRecord waits under the primary secret's identity and opens the
// record the notification carried; one that does not open (sealed by a
// secret this keyring lacks, damaged) is handed over as nil, and the
// waiter reads the store.
func (s *carryingStore) SubscribeRecord(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *store.Record, func(), error) {
	id := s.identity(s.ring.keys[0], scope, keyHash)
	ch, carried, cancel, err := s.c.SubscribeCarried(ctx, id.scope, id.keyHash)
	if err != nil {
		return nil, nil, nil, err
	}
	return ch, func() *store.Record {
		r := carried()
		if r == nil {
			return nil
		}
		rec, err := s.open(*r, id, scope, keyHash)
		if err != nil {
			return nil
		}
		return &rec
	}, cancel, nil
}
