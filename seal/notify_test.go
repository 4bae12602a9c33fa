package seal_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/postgres"
)

// recorder is a backend that is a Notifier and records what crosses it.
type recorder struct {
	store.Store
	mu   sync.Mutex
	seen []string
}

func (r *recorder) Notify(_ context.Context, scope, keyHash string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, scope, keyHash)
	return nil
}

func (r *recorder) Subscribe(_ context.Context, scope, keyHash string) (<-chan struct{}, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, scope, keyHash)
	return make(chan struct{}), func() {}, nil
}

// Notifications carry sealed identities, never the engine's scope (which
// holds the tenant) or its unkeyed key hash; they go out under every
// secret's identity.
func TestNotifyIsSealed(t *testing.T) {
	t.Parallel()
	rec := &recorder{Store: memory.New()}
	s := seal.Wrap(rec, mustRing(t, secretB+","+secretA))
	n, ok := store.NotifierOf(s)
	if !ok {
		t.Fatal("the seal over a Notifier is not one")
	}
	plain := struct{ store.Store }{memory.New()} // a backend that cannot notify
	if _, ok := store.NotifierOf(seal.Wrap(plain, mustRing(t, secretA))); ok {
		t.Fatal("the seal over a backend without notifications claims to notify")
	}
	scope, kh := "auth:bfd25c2ca91549c5", store.HashKey("auth:bfd25c2ca91549c5", "order-1")
	if err := n.Notify(context.Background(), scope, kh); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Subscribe(context.Background(), scope, kh); err != nil {
		t.Fatal(err)
	}
	if len(rec.seen) != 6 { // two notifies, one subscription
		t.Fatalf("seen %q", rec.seen)
	}
	for _, v := range rec.seen {
		if v == scope || v == kh {
			t.Fatalf("the engine's %q crossed to the backend", v)
		}
	}
}

// Over PostgreSQL, a waiter on a gateway with the new secret first is woken
// by a holder on a gateway that still has the old one first.
func TestNotifyAcrossRotation(t *testing.T) {
	t.Parallel()
	a := pgStore(t, pgPool(t))
	b, err := postgres.New(pgPool(t), a.Options())
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := store.NotifierOf(seal.Wrap(a, mustRing(t, secretB+","+secretA)))
	holder, _ := store.NotifierOf(seal.Wrap(b, mustRing(t, secretA+","+secretB)))
	kh := store.HashKey("s", "order-1")
	ctx := context.Background()
	ch, unsub, err := waiter.Subscribe(ctx, "s", kh)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if err := holder.Notify(ctx, "s", kh); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	a.Close()
	b.Close()
}

// recordRecorder is a backend that can carry records in its
// notifications (store.RecordNotifier), as PostgreSQL's does.
type recordRecorder struct{ *recorder }

func (r recordRecorder) NotifyRecord(ctx context.Context, rec store.Record) error {
	return r.Notify(ctx, rec.Scope, rec.KeyHash)
}

func (r recordRecorder) SubscribeRecord(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *store.Record, func(), error) {
	ch, cancel, err := r.Subscribe(ctx, scope, keyHash)
	return ch, func() *store.Record { return nil }, cancel, err
}

// The engine's unsealed record never crosses a sealed store's
// notifications: over a backend that is a store.RecordNotifier (which
// would carry what it is given as the engine's), the seal's Notifier,
// which the engine finds first, carries no record. Only over a
// store.RecordCarrier does it carry one, sealed (store/postgres's
// TestListenerWithoutTableAccess).
func TestNotifyCarriesNoRecord(t *testing.T) {
	t.Parallel()
	backend := recordRecorder{&recorder{Store: memory.New()}}
	var _ store.RecordNotifier = backend
	n, ok := store.NotifierOf(seal.Wrap(backend, mustRing(t, secretA)))
	if !ok {
		t.Fatal("the seal over a Notifier is not one")
	}
	if _, ok := n.(store.RecordNotifier); ok {
		t.Fatal("the seal's Notifier would carry the engine's unsealed records")
	}
}
