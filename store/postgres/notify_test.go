package postgres

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/seal"
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

func subscribe(t testing.TB, s *Store, keyHash string) (<-chan struct{}, func()) {
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

// wakePair is what two gateways over one table run on: the holder's store
// a and the waiter's b, both sealed or both not, with the waiter's reads
// of the table counted by rb, under b.
type wakePair struct {
	a, b store.Store
	ra   *Store
	rb   *reading
}

// testSecret seals the stores of the sealed pairs.
const testSecret = "a-secret-of-at-least-16-bytes-AAAA"

func pairOf(t testing.TB, a *Store, rb *reading, sealed bool) wakePair {
	t.Helper()
	p := wakePair{a: a, b: rb, ra: a, rb: rb}
	if sealed {
		ring, err := seal.ParseKeyring(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		p.a, p.b = seal.Wrap(a, ring), seal.Wrap(rb, ring)
	}
	return p
}

// startCrossWake starts a holder on p.a whose call returns value once
// finish is closed, and a waiter on p.b, and returns once the waiter
// parked.
func startCrossWake(t testing.TB, p wakePair, value []byte) *crossWake {
	t.Helper()
	pol := idem.Policy{Wait: time.Minute, CleanupInterval: -1}
	noPolling := idem.WithWaitPolling(time.Hour, time.Hour)
	ea, eb := idem.New(p.a, pol, noPolling), idem.New(p.b, pol, noPolling)
	t.Cleanup(func() { ea.Close(); eb.Close() })
	for _, s := range []*Store{p.ra, p.rb.Store} { // start both listeners
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
	reserves := p.rb.reserves.Load()
	go func() {
		call := w.call
		call.RequestID = "req-2"
		res, err := eb.Do(context.Background(), call, func(context.Context) ([]byte, error) {
			return []byte("ran twice"), nil
		})
		w.got <- waited{res, err}
	}()
	// Parked: one reservation found the key held, one more once subscribed.
	for deadline := time.Now().Add(10 * time.Second); p.rb.reserves.Load() < reserves+2; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never parked")
		}
	}
	return w
}

// end lets the holder return and checks it recorded its outcome.
func (w *crossWake) end(t testing.TB) {
	t.Helper()
	close(w.finish)
	if err := <-w.held; err != nil {
		t.Fatalf("holder: %v", err)
	}
}

// wakeAcross runs a holder on p.a and one waiter on p.b, which polls only
// hourly, for a call whose outcome is value, and returns what the waiter
// got and how many times it read the table.
func wakeAcross(t testing.TB, p wakePair, value []byte) (idem.Result, int64) {
	t.Helper()
	w := startCrossWake(t, p, value)
	gets := p.rb.gets.Load()
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
	return o.res, p.rb.gets.Load() - gets
}

// TestNotifyCarriesSealedRecord: across two sealed stores, as across two
// gateways with IDEM_SECRET, the holder's notification carries its sealed
// record and the waiter replays it without reading the table; unsealed,
// the notification carries the key hash alone and the waiter reads the
// table once.
func TestNotifyCarriesSealedRecord(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	sealed := pairOf(t, a, b, true)
	if _, gets := wakeAcross(t, sealed, []byte("charged")); gets != 0 {
		t.Fatalf("sealed: the waiter read the table %d times; the notification carried the record", gets)
	}
	// The largest value that fits sealed still travels with the
	// notification.
	big := bytes.Repeat([]byte("x"), 5000)
	if _, gets := wakeAcross(t, sealed, big); gets != 0 {
		t.Fatalf("sealed, a %d-byte value: the waiter read the table %d times", len(big), gets)
	}
	if _, gets := wakeAcross(t, pairOf(t, a, b, false), []byte("charged")); gets != 1 {
		t.Fatalf("unsealed: the waiter read the table %d times, want 1 (woken by the key hash alone)", gets)
	}
}

// TestNotifyRecordTooLarge: a sealed record whose payload exceeds
// NotifyRecordMax (or PostgreSQL's limit) is announced by its key hash, and
// the waiter reads it from the table; so with NotifyRecordMax negative.
func TestNotifyRecordTooLarge(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	if _, gets := wakeAcross(t, pairOf(t, a, b, true), bytes.Repeat([]byte("x"), 8000)); gets != 1 {
		t.Fatalf("an 8000-byte value: the waiter read the table %d times, want 1", gets)
	}
	small := opts
	small.NotifyRecordMax = 200
	a = newTestStore(t, pool, small)
	if _, gets := wakeAcross(t, pairOf(t, a, b, true), bytes.Repeat([]byte("x"), 200)); gets != 1 {
		t.Fatalf("over NotifyRecordMax: the waiter read the table %d times, want 1", gets)
	}
	off := opts
	off.NotifyRecordMax = -1
	a = newTestStore(t, pool, off)
	if _, gets := wakeAcross(t, pairOf(t, a, b, true), []byte("charged")); gets != 1 {
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
	w := startCrossWake(t, pairOf(t, a, b, false), []byte("charged"))
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
	if err := a.CarryRecord(context.Background(), late); err != nil {
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

// recordsInTheClear is what the store was before notifications stopped
// carrying unsealed records: a store.RecordNotifier that hands the
// engine's record to the channel as it is. BenchmarkWaiterWake's baseline.
type recordsInTheClear struct{ *reading }

func (r recordsInTheClear) NotifyRecord(ctx context.Context, rec store.Record) error {
	return r.CarryRecord(ctx, rec)
}

func (r recordsInTheClear) SubscribeRecord(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *store.Record, func(), error) {
	return r.SubscribeCarried(ctx, scope, keyHash)
}

// BenchmarkWaiterWake: what a waiter in another process pays, from the
// moment the holder's work returns to the waiter's replay, when the
// notification carries the key hash alone and the waiter reads the table
// (no secret), when it carries the sealed record (IDEM_SECRET set), and,
// the baseline, when it carried the record in the clear (before). The
// three alternate round by round, so that the load of a shared machine
// falls on all alike; each reports its median and 90th percentile
// (wake-p50-us, wake-p90-us). A 1 KiB outcome. Figures: docs/bench/STORES.md.
func BenchmarkWaiterWake(b *testing.B) {
	pool, peerPool := testPool(b, 4), testPool(b, 4)
	opts := freshSchema(b, pool)
	a := newTestStore(b, pool, opts)
	rb := &reading{Store: newTestStore(b, peerPool, opts)}
	ra := &reading{Store: a}
	variants := []struct {
		name string
		pair wakePair
	}{
		{"clear-record", wakePair{a: recordsInTheClear{ra}, b: recordsInTheClear{rb}, ra: a, rb: rb}},
		{"key-hash-read", pairOf(b, a, rb, false)},
		{"sealed-record", pairOf(b, a, rb, true)},
	}
	value := bytes.Repeat([]byte("v"), 1024)
	lats := make([][]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			w := startCrossWake(b, v.pair, value)
			t0 := time.Now()
			w.end(b)
			o := <-w.got
			lats[i] = append(lats[i], time.Since(t0))
			if o.err != nil || !bytes.Equal(o.res.Value, value) {
				b.Fatalf("%s: waiter got %v", v.name, o.err)
			}
		}
	}
	for i, v := range variants {
		l := lats[i]
		slices.Sort(l)
		q := func(f float64) float64 { return float64(l[int(f*float64(len(l)-1))].Nanoseconds()) / 1e3 }
		b.ReportMetric(q(0.5), v.name+"-wake-p50-us")
		b.ReportMetric(q(0.9), v.name+"-wake-p90-us")
	}
	b.ReportMetric(0, "ns/op")
}
