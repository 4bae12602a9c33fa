package memory

import (
	"context"

	"github.com/idem-dev/idem/store"
)

var _ store.Notifier = (*Store)(nil)

// Notify implements store.Notifier. The store lives in one process, so
// this wakes the waiters of every engine sharing it, at once.
func (s *Store) Notify(ctx context.Context, _, keyHash string) error {
	s.hub.Wake(keyHash)
	return nil
}

// Subscribe implements store.Notifier. It never fails: there is no
// listener to wait for.
func (s *Store) Subscribe(ctx context.Context, _, keyHash string) (<-chan struct{}, func(), error) {
	if err := s.lock(ctx); err != nil {
		return nil, nil, err
	}
	// Under s.mu, so that Close, which wakes everyone, cannot slip between
	// the check and the subscription.
	ch, cancel := s.hub.Subscribe(keyHash)
	s.mu.Unlock()
	return ch, cancel, nil
}
