package postgres

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
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

// reading counts the reads and reservations made through a Store, which
// it stays (a store.RecordNotifier too).
type reading struct {
	*Store
	gets, reserves atomic.Int64
}

func (r *reading) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	r.gets.Add(1)
	return r.Store.Get(ctx, scope, keyHash)
}

func (r *reading) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	defer r.reserves.Add(1) // once it answered: a parked waiter answered twice
	return r.Store.Reserve(ctx, req)
}

// crossWake is a holder on one store and a waiter on another, which polls
// only hourly, parked on the holder's key.
type crossWake struct {
	call   idem.Call
	finish chan struct{} // closed: the holder returns value
	held   chan error    // the holder's error
	got    chan waited   // the waiter's outcome
}

type waited struct {
	res idem.Result
	err error
}

// startCrossWake starts a holder on a whose call returns value once
// finish is closed, and a waiter on b, and returns once the waiter parked.
func startCrossWake(t *testing.T, a *Store, b *reading, value []byte) *crossWake {
	t.Helper()
	p := idem.Policy{Wait: time.Minute, CleanupInterval: -1}
	noPolling := idem.WithWaitPolling(time.Hour, time.Hour)
	ea, eb := idem.New(a, p, noPolling), idem.New(b, p, noPolling)
	t.Cleanup(func() { ea.Close(); eb.Close() })
	for _, s := range []*Store{a, b.Store} { // start both listeners
		_, cancel := subscribe(t, s, store.HashKey("test", "warm-up"))
		cancel()
	}
	w := &crossWake{
		call:   idem.Call{Scope: "test", Key: uniqueName("k"), Fingerprint: "fp", RequestID: "req-1"},
		finish: make(chan struct{}), held: make(chan error, 1), got: make(chan waited, 1),
	}
	started := make(chan struct{})
	go func() {
		_, err := ea.Do(context.Background(), w.call, func(context.Context) ([]byte, error) {
			close(started)
			<-w.finish
			return value, nil
		})
		w.held <- err
	}()
	<-started
	reserves := b.reserves.Load()
	go func() {
		call := w.call
		call.RequestID = "req-2"
		res, err := eb.Do(context.Background(), call, func(context.Context) ([]byte, error) {
			return []byte("ran twice"), nil
		})
		w.got <- waited{res, err}
	}()
	// Parked: one reservation found the key held, one more once subscribed.
	for deadline := time.Now().Add(10 * time.Second); b.reserves.Load() < reserves+2; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never parked")
		}
	}
	return w
}

// end lets the holder return and checks it recorded its outcome.
func (w *crossWake) end(t *testing.T) {
	t.Helper()
	close(w.finish)
	if err := <-w.held; err != nil {
		t.Fatalf("holder: %v", err)
	}
}

// wakeAcross runs a holder on a and one waiter on b, which polls only
// hourly, for a call whose outcome is value, and returns what the waiter
// got and how many times it read the table.
func wakeAcross(t *testing.T, a *Store, b *reading, value []byte) (idem.Result, int64) {
	t.Helper()
	w := startCrossWake(t, a, b, value)
	gets := b.gets.Load()
	w.end(t)
	var o waited
	select {
	case o = <-w.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if o.err != nil || !o.res.Replayed || !bytes.Equal(o.res.Value, value) || o.res.RequestID != "req-1" {
		t.Fatalf("waiter: %+v %v, want the holder's outcome replayed", o.res, o.err)
	}
	return o.res, b.gets.Load() - gets
}

// TestNotifyCarriesRecord: across two stores, as across two gateways, the
// holder's notification carries its record and the waiter replays it
// without reading the table.
func TestNotifyCarriesRecord(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	if _, gets := wakeAcross(t, a, b, []byte("charged")); gets != 0 {
		t.Fatalf("the waiter read the table %d times; the notification carried the record", gets)
	}
	// The largest value that fits still travels with the notification.
	big := bytes.Repeat([]byte("x"), 5500)
	if _, gets := wakeAcross(t, a, b, big); gets != 0 {
		t.Fatalf("a %d-byte value: the waiter read the table %d times", len(big), gets)
	}
}

// TestNotifyRecordTooLarge: a record whose payload exceeds
// NotifyRecordMax (or PostgreSQL's limit) is announced by its key hash, and
// the waiter reads it from the table; so with NotifyRecordMax negative.
func TestNotifyRecordTooLarge(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	if _, gets := wakeAcross(t, a, b, bytes.Repeat([]byte("x"), 8000)); gets != 1 {
		t.Fatalf("an 8000-byte value: the waiter read the table %d times, want 1", gets)
	}
	small := opts
	small.NotifyRecordMax = 200
	a = newTestStore(t, pool, small)
	if _, gets := wakeAcross(t, a, b, bytes.Repeat([]byte("x"), 200)); gets != 1 {
		t.Fatalf("over NotifyRecordMax: the waiter read the table %d times, want 1", gets)
	}
	off := opts
	off.NotifyRecordMax = -1
	a = newTestStore(t, pool, off)
	if _, gets := wakeAcross(t, a, b, []byte("charged")); gets != 1 {
		t.Fatalf("NotifyRecordMax -1: the waiter read the table %d times, want 1", gets)
	}
}

// TestNotifyRecordOfAnotherHolder: a notification that carries the record
// of another holding of the key (an earlier holder's, sent late) is not
// taken for the outcome the waiter waits for: it reads the table, finds
// the key still held, and waits on for the real outcome.
func TestNotifyRecordOfAnotherHolder(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	w := startCrossWake(t, a, b, []byte("charged"))
	call := w.call
	kh := store.HashKey("test", call.Key)
	cur, err := a.Get(context.Background(), "test", kh)
	if err != nil || cur.State != store.InProgress {
		t.Fatalf("the holder's record: %+v %v", cur, err)
	}
	late := cur
	late.Token++ // another holding's
	late.State, late.Value = store.Succeeded, []byte("stale")
	gets := b.gets.Load()
	if err := a.NotifyRecord(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	// Woken, the waiter reads the key (still held) and parks again.
	for deadline := time.Now().Add(10 * time.Second); b.gets.Load() == gets; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not read the table after a notification of another holding")
		}
	}
	select {
	case o := <-w.got:
		t.Fatalf("the waiter returned %q (%v) before the holder ended", o.res.Value, o.err)
	case <-time.After(50 * time.Millisecond):
	}
	w.end(t)
	select {
	case o := <-w.got:
		if o.err != nil || !o.res.Replayed || string(o.res.Value) != "charged" {
			t.Fatalf("waiter: %+v %v, want the holder's outcome", o.res, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the holder")
	}
}
