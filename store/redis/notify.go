package redisstore

import (
	"context"
	"fmt"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
)

var _ store.Notifier = (*Store)(nil)

// Channel returns the pub/sub channel on which the store announces that a
// record left in_progress: Prefix + "notify", so that stores with other
// prefixes never wake each other's waiters.
func (s *Store) Channel() string { return s.prefix + "notify" }

// listener returns the store's one subscribed connection, made on first
// use. go-redis gives a PubSub a dedicated connection of its own.
func (s *Store) listener() *wakeup.Listener {
	s.notifyOnce.Do(func() {
		channel := s.Channel()
		s.notify = wakeup.NewListener(func(ctx context.Context, ready func(), wake func(string)) error {
			ps := s.client.Subscribe(ctx, channel)
			defer ps.Close()
			// A blocked read does not watch ctx unless the client was made
			// with ContextTimeoutEnabled: closing the PubSub ends it.
			stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
			defer stop()
			if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
				return err
			}
			ready()
			for {
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					return err
				}
				wake(m.Payload)
			}
		})
	})
	return s.notify
}

// Notify implements store.Notifier with PUBLISH on the store's channel; the
// payload is the key hash. It costs one round trip, which the engine spends
// only for policies that wait.
func (s *Store) Notify(ctx context.Context, _, keyHash string) error {
	const op = "notify"
	if err := s.check(ctx, op); err != nil {
		return err
	}
	if err := s.client.Publish(ctx, s.Channel(), keyHash).Err(); err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return nil
}

// Subscribe implements store.Notifier. The first call starts the store's
// subscribed connection and waits for it briefly; it resubscribes when the
// connection breaks, and wakes every subscriber then, since messages
// published meanwhile are lost (Redis pub/sub keeps none).
func (s *Store) Subscribe(ctx context.Context, _, keyHash string) (<-chan struct{}, func(), error) {
	const op = "subscribe"
	if err := s.check(ctx, op); err != nil {
		return nil, nil, err
	}
	ch, cancel, err := s.listener().Subscribe(ctx, keyHash)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return ch, cancel, nil
}

// closeNotify stops the subscribed connection, if one was started.
func (s *Store) closeNotify() {
	s.notifyOnce.Do(func() {}) // no listener may start after Close
	if s.notify != nil {
		s.notify.Close()
	}
}
