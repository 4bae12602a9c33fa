package idem_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// reads counts a store's Reserve and Get calls; embedding store.Store hides the
// memory store's Notifier, so only the engine's own wake-up is left.
type reads struct {
	store.Store
	n atomic.Int32
}

func (r *reads) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r.n.Add(1)
	return r.Store.Reserve(ctx, req)
}

func (r *reads) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	r.n.Add(1)
	return r.Store.Get(ctx, scope, keyHash)
}

// parked waits until n callers of eng wait for key.
func parked(t *testing.T, eng *idem.Engine, key string, n int) {
	t.Helper()
	kh := store.HashKey("charges", key)
	for deadline := time.Now().Add(10 * time.Second); idem.Waiters(eng, kh) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters parked, want %d", idem.Waiters(eng, kh), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// noPolling makes waiters read the record once an hour: a waiter that
// returns sooner was woken.
var noPolling = idem.WithWaitPolling(time.Hour, time.Hour)

// woken bounds a waiter: one that is woken returns within milliseconds,
// one that is not would wait for its hour-long Policy.Wait, so it fails
// with this deadline instead (generous: the machine is shared).
func woken() (context.Context, context.CancelFunc) {
	return context.WithTimeout(bg, 20*time.Second)
}

// holder starts a call on eng that runs until finish is closed, and
// returns once it holds the key.
func holder(t *testing.T, eng *idem.Engine, key string, v []byte, err error) (finish chan struct{}, done <-chan error) {
	t.Helper()
	started, fin, d := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := eng.Do(bg, call(key), func(context.Context) ([]byte, error) {
			close(started)
			<-fin
			return v, err
		})
		d <- err
	}()
	<-started
	return fin, d
}

// TestWaiterWokenInProcess: a duplicate that waits (the mobile app's
// retry while the first request still runs) gets the outcome when the
// holder ends, woken by it, not by polling: polling is set to hours.
func TestWaiterWokenInProcess(t *testing.T) {
	t.Parallel()
	st := &reads{Store: memory.New()}
	eng := idem.New(st, idem.Policy{Wait: time.Hour, CleanupInterval: -1}, quiet, noPolling)

	finish, done := holder(t, eng, "k", []byte("charged"), nil)
	const waiters = 8
	var wg sync.WaitGroup
	results := make(chan error, waiters)
	before := st.n.Load()
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := &counter{}
			ctx, cancel := woken()
			defer cancel()
			res, err := eng.Do(ctx, call("k"), op.fn)
			if err == nil && (!res.Replayed || string(res.Value) != "charged" || op.n.Load() != 0) {
				err = errors.New("waiter did not get the holder's outcome: " + string(res.Value))
			}
			results <- err
		}()
	}
	parked(t, eng, "k", waiters)
	close(finish)
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Each waiter reads twice: finds the key held, reads again once
	// subscribed. The outcome is handed over by the holder: no third read.
	if got := st.n.Load() - before; got != 2*waiters {
		t.Fatalf("%d waiters read the store %d times, want %d", waiters, got, 2*waiters)
	}
}

// TestWaiterWokenByRelease: a holder whose call failed and was released
// wakes its waiters, and one of them runs the operation.
func TestWaiterWokenByRelease(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{Wait: time.Hour, CleanupInterval: -1}, quiet, noPolling)
	finish, done := holder(t, eng, "k", nil, errors.New("card_declined"))
	op := &counter{value: "v"}
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := woken()
		defer cancel()
		res, err := eng.Do(ctx, call("k"), op.fn)
		if err == nil && (res.Replayed || op.n.Load() != 1) {
			err = errors.New("the waiter did not run the operation")
		}
		waited <- err
	}()
	parked(t, eng, "k", 1)
	close(finish)
	if err := <-done; err == nil {
		t.Fatal("holder did not fail")
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// TestWaiterWokenAcrossEngines: two engines over one store (two gateways
// in one process, or two processes when the store notifies across them):
// the store's Notifier wakes the waiter of the other engine.
func TestWaiterWokenAcrossEngines(t *testing.T) {
	t.Parallel()
	st := memory.New()
	p := idem.Policy{Wait: time.Hour, CleanupInterval: -1}
	gw1, gw2 := idem.New(st, p, quiet), idem.New(st, p, quiet, noPolling)
	finish, done := holder(t, gw1, "k", []byte("charged"), nil)
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := woken()
		defer cancel()
		res, err := gw2.Do(ctx, call("k"), (&counter{}).fn)
		if err == nil && string(res.Value) != "charged" {
			err = errors.New("wrong outcome " + string(res.Value))
		}
		waited <- err
	}()
	parked(t, gw2, "k", 1)
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// TestWaiterGivesUpAtWait: nobody wakes it; it answers in_progress once
// Policy.Wait is over, and leaves no subscription behind.
func TestWaiterGivesUpAtWait(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{Wait: 30 * time.Millisecond, CleanupInterval: -1}, quiet)
	finish, done := holder(t, eng, "k", nil, nil)
	defer func() { close(finish); <-done }()
	if _, err := eng.Do(bg, call("k"), (&counter{}).fn); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("%v, want in_progress", err)
	}
	if n := idem.Waiters(eng, store.HashKey("charges", "k")); n != 0 {
		t.Fatalf("%d subscriptions left", n)
	}
}

// deaf is a store whose Notifier subscribes but never delivers: every
// notification is lost, as on a listener connection that broke unnoticed.
type deaf struct{ store.Store }

func (deaf) Notify(context.Context, string, string) error { return nil }
func (deaf) Subscribe(context.Context, string, string) (<-chan struct{}, func(), error) {
	return make(chan struct{}), func() {}, nil
}

// TestLostNotificationPollCap: a waiter whose notification never comes
// still gets the outcome, by its safety-net poll, every poll cap.
func TestLostNotificationPollCap(t *testing.T) {
	t.Parallel()
	st := memory.New()
	p := idem.Policy{Wait: time.Hour, CleanupInterval: -1}
	gw1 := idem.New(deaf{st}, p, quiet)
	gw2 := idem.New(deaf{st}, p, quiet, idem.WithWaitPolling(time.Hour, 20*time.Millisecond))
	finish, done := holder(t, gw1, "k", []byte("charged"), nil)
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := woken()
		defer cancel()
		res, err := gw2.Do(ctx, call("k"), (&counter{}).fn)
		if err == nil && string(res.Value) != "charged" {
			err = errors.New("wrong outcome " + string(res.Value))
		}
		waited <- err
	}()
	parked(t, gw2, "k", 1)
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}
