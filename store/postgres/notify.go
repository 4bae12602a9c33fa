package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
)

// The store carries records only for a wrapper that seals them: PostgreSQL
// lets every role LISTEN on every channel, whatever its privileges on the
// table, so the engine's records (scope, raw key, outcome) must never
// cross it in the clear. Unsealed, a waiter is woken by the key hash and
// reads the table.
var _ store.RecordCarrier = (*Store)(nil)

// channelOf is the LISTEN/NOTIFY channel of the table of opts: stores over
// other tables never wake each other's waiters. It is derived from the
// qualified table name, so it fits PostgreSQL's 63-byte identifiers.
func channelOf(opts Options) string {
	h := sha256.Sum256([]byte(opts.qualified()))
	return "idem_" + hex.EncodeToString(h[:12])
}

// channel is the store's channel, computed once by New.
func (s *Store) channel() string { return s.chanName }

// listener returns the store's one listening connection, made on first
// use with the pool's connection settings (not taken from the pool, which
// it would hold for good).
func (s *Store) listener() *wakeup.Listener {
	s.notifyOnce.Do(func() {
		channel := s.channel()
		s.notify = wakeup.NewListener(func(ctx context.Context, ready func(), wake func(string)) error {
			conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
			if err != nil {
				return err
			}
			defer func() {
				// Bounded: a server that stopped answering must not hold up
				// Close.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_ = conn.Close(cctx)
			}()
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				return err
			}
			ready()
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				wake(n.Payload)
			}
		})
		s.notify.Split = splitPayload
	})
	return s.notify
}

// notifySQL sends the notification in a transaction of its own. It does
// not wait for a disk flush: a NOTIFY writes no WAL of its own.
const notifySQL = `SELECT pg_notify($1, $2)`

// Notify implements store.Notifier with NOTIFY on the table's channel; the
// payload is the key hash. It costs one round trip, which the engine spends
// only for policies that wait.
func (s *Store) Notify(ctx context.Context, _, keyHash string) error {
	return s.send(ctx, keyHash)
}

// send sends a notification's payload on the store's channel.
func (s *Store) send(ctx context.Context, payload string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, notifySQL, s.channel(), payload); err != nil {
		return wrapErr(ctx, "notify", err)
	}
	return nil
}

// CarryRecord implements store.RecordCarrier: the notification carries
// rec, as given, when its payload fits Options.NotifyRecordMax, so that
// waiters in other processes replay it without reading the table.
// Otherwise it is Notify. Every role that can connect may read it: only a
// sealed record may be given (package seal does).
func (s *Store) CarryRecord(ctx context.Context, rec store.Record) error {
	payload := rec.KeyHash
	if rec.State != store.InProgress && s.opts.NotifyRecordMax > 0 {
		if b, ok := appendPayload(nil, &rec, s.opts.NotifyRecordMax); ok {
			payload = string(b)
		}
	}
	return s.send(ctx, payload)
}

// SubscribeCarried implements store.RecordCarrier: Subscribe, plus the
// record the waking notification carried, if any.
func (s *Store) SubscribeCarried(ctx context.Context, _, keyHash string) (<-chan struct{}, func() *store.Record, func(), error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, nil, err
	}
	ch, val, cancel, err := s.listener().SubscribeValue(ctx, keyHash)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres store: subscribe: %w", err)
	}
	return ch, func() *store.Record { r, _ := val().(*store.Record); return r }, cancel, nil
}

// Subscribe implements store.Notifier. The first call starts the store's
// listening connection (LISTEN on the table's channel) and waits for it
// briefly; it reconnects when the connection breaks, and wakes every
// subscriber then, since notifications sent meanwhile are lost.
func (s *Store) Subscribe(ctx context.Context, _, keyHash string) (<-chan struct{}, func(), error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	ch, cancel, err := s.listener().Subscribe(ctx, keyHash)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres store: subscribe: %w", err)
	}
	return ch, cancel, nil
}

// closeNotify stops the listening connection, if one was started.
func (s *Store) closeNotify() {
	s.notifyOnce.Do(func() {}) // no listener may start after Close
	if s.notify != nil {
		s.notify.Close()
	}
}
