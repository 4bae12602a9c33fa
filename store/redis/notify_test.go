package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two stores under one prefix through two clients, as two
// gateways would be: a waiter on one is woken by pub/sub when the holder on
// the other ends, and the figure of that wake-up is logged (go test -v).
func TestWake(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix()
	ca, cb := newClient(t, nil), newClient(t, nil)
	a, err := redisstore.New(ca, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	b, err := redisstore.New(cb, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close(); dropPrefix(t, ca, prefix) })
	storetest.RunWake(t, a, b)
}

// TestWakeRueidis: the same across two rueidis clients, as two gateways run.
func TestWakeRueidis(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix()
	ca := newClient(t, nil)
	a, err := redisstore.NewRueidis(newRueidis(t, testAddr(t)), redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	b, err := redisstore.NewRueidis(newRueidis(t, testAddr(t)), redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close(); dropPrefix(t, ca, prefix) })
	storetest.RunWake(t, a, b)
}

// TestListenerReconnects: the server dies and comes back (a restart, a
// failover). The subscribed connection's waiters are woken, since messages
// published meanwhile are lost, and it subscribes again. A go-redis client
// that honours context deadlines, go-redis's default and rueidis are tried.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, client := range []string{"ContextTimeoutEnabled=true", "ContextTimeoutEnabled=false", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			var s *redisstore.Store
			var err error
			if client == "rueidis" {
				s, err = redisstore.NewRueidis(newRueidis(t, srv.addr()), redisstore.Options{Prefix: uniquePrefix()})
			} else {
				c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: client == "ContextTimeoutEnabled=true"})
				t.Cleanup(func() { _ = c.Close() })
				s, err = redisstore.New(c, redisstore.Options{Prefix: uniquePrefix()})
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			kh := store.HashKey("test", "k")
			ch, cancel := subscribe(t, s, kh)
			defer cancel()
			srv.kill()
			srv.start()
			select {
			case <-ch:
			case <-time.After(15 * time.Second):
				t.Fatal("the subscriber was not woken after the connection broke")
			}
			ch, cancel2 := subscribe(t, s, kh)
			defer cancel2()
			if err := s.Notify(context.Background(), "test", kh); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatal("no notification after the listener resubscribed")
			}
		})
	}
}

func subscribe(t *testing.T, s *redisstore.Store, keyHash string) (<-chan struct{}, func()) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		ch, cancel, err := s.Subscribe(context.Background(), "test", keyHash)
		if err == nil {
			return ch, cancel
		}
		if time.Now().After(deadline) {
			t.Fatalf("Subscribe: %v", err)
		}
	}
}

// TestPublishCarriesKeyHashOnly: any client of the server may SUBSCRIBE to
// the store's channel. While a call with waiters (Policy.Wait) completes,
// a subscriber of its own reads the key hash alone: no scope, raw key or
// outcome, with no secret (PostgreSQL's notifications carried them once;
// store/postgres's TestListenerWithoutTableAccess).
func TestPublishCarriesKeyHashOnly(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix()
	c := newClient(t, nil)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); dropPrefix(t, c, prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snoop := newClient(t, nil).Subscribe(ctx, s.Channel())
	defer snoop.Close()
	if _, err := snoop.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	eng := idem.New(s, idem.Policy{Wait: time.Minute, CleanupInterval: -1})
	defer eng.Close()
	const scope, key, body = "tenant-snoop", "key-snoop-1", "the-response-body-snoop"
	if _, err := eng.Do(ctx, idem.Call{Scope: scope, Key: key, Fingerprint: "fp", RequestID: "req-snoop"},
		func(context.Context) ([]byte, error) { return []byte(body), nil }); err != nil {
		t.Fatal(err)
	}
	msg, err := snoop.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no notification published: %v", err)
	}
	for _, secret := range []string{scope, key, body, "req-snoop"} {
		if strings.Contains(msg.Payload, secret) {
			t.Errorf("the notification %q carries %q", msg.Payload, secret)
		}
	}
	if len(msg.Payload) != 64 || strings.Trim(msg.Payload, "0123456789abcdef") != "" {
		t.Errorf("the notification %q is not a key hash alone", msg.Payload)
	}
}
