package file

import (
	"context"
	"fmt"

	"github.com/idem-dev/idem/store"
)

var _ store.Notifier = (*Store)(nil)

// Notify implements store.Notifier. One process owns the directory, so
// this wakes the waiters of every engine sharing the store, at once.
func (s *Store) Notify(_ context.Context, _, keyHash string) error {
	s.hub.Wake(keyHash)
	return nil
}

// Subscribe implements store.Notifier. It never fails while the store is
// open: there is no listener to wait for.
func (s *Store) Subscribe(ctx context.Context, _, keyHash string) (<-chan struct{}, func(), error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, fmt.Errorf("file: subscribe: %w", err)
	}
	// Under closeMu, so that Close, which wakes everyone, cannot slip
	// between the check and the subscription.
	ch, cancel := s.hub.Subscribe(keyHash)
	s.closeMu.RUnlock()
	return ch, cancel, nil
}
