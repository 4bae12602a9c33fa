package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two stores over one table through two pools, as two gateways
// would be: a waiter on one is woken by LISTEN/NOTIFY when the holder on
// the other ends, and the figure of that wake-up is logged (go test -v).
func TestWake(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 8), testPool(t, 8)
	opts := freshSchema(t, pool)
	a, b := newTestStore(t, pool, opts), newTestStore(t, peerPool, opts)
	storetest.RunWake(t, a, b)
}

// TestListenerReconnects: the listening connection is killed (a server
// restart, a failover, an idle-connection reaper). Its subscribers are
// woken, since notifications may have been missed, and it listens again.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	opts := freshSchema(t, pool)
	s := newTestStore(t, pool, opts)
	ctx := context.Background()
	kh := store.HashKey("test", "k")
	ch, cancel := subscribe(t, s, kh)
	defer cancel()

	tag, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query = 'LISTEN "' || $1 || '"'`, s.channel())
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminate the listener: %v (%d rows)", err, tag.RowsAffected())
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber was not woken after the listener's connection broke")
	}
	ch, cancel2 := subscribe(t, s, kh)
	defer cancel2()
	if err := s.Notify(ctx, "test", kh); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the listener reconnected")
	}
}

func subscribe(t *testing.T, s *Store, keyHash string) (<-chan struct{}, func()) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ch, cancel, err := s.Subscribe(context.Background(), "test", keyHash)
		if err == nil {
			return ch, cancel
		}
		if time.Now().After(deadline) {
			t.Fatalf("Subscribe: %v", err)
		}
	}
}
