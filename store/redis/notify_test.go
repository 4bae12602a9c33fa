package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two stores under one prefix through two clients, as two
// gateways would be: a waiter on one is woken by pub/sub when the holder on
// the other ends, and the figure of that wake-up is logged (go test -v).
func TestWake(t *testing.T) {
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

// TestListenerReconnects: the server dies and comes back (a restart, a
// failover). The subscribed connection's waiters are woken, since messages
// published meanwhile are lost, and it subscribes again. Both a client that
// honours context deadlines and go-redis's default are tried.
func TestListenerReconnects(t *testing.T) {
	srv := startServer(t)
	redis.SetLogger(quietLogger{})
	for _, cte := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", cte), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: cte})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix()})
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
