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
