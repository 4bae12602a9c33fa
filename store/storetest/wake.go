package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// testNotifier checks a store's Notifier across two clients: a Notify on
// one wakes the subscribers of that key on the other, and no others.
func testNotifier(t *testing.T, h Harness) {
	s := newStore(t, h)
	n, ok := s.(store.Notifier)
	if !ok {
		t.Skip("the store does not implement store.Notifier; waiters poll")
	}
	peer := s
	if h.Peer != nil {
		peer = h.Peer(t, s)
		t.Cleanup(func() { _ = peer.Close() })
	}
	pn := peer.(store.Notifier)
	ctx := context.Background()
	a, b := store.HashKey("test", uniqueKey(t)), store.HashKey("test", uniqueKey(t))
	chA, cancelA := mustSubscribe(t, pn, a)
	defer cancelA()
	chB, cancelB := mustSubscribe(t, pn, b)
	defer cancelB()
	if err := n.Notify(ctx, "test", a); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	select {
	case <-chA:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber of the notified key was not woken")
	}
	select {
	case <-chB:
		t.Fatal("the subscriber of another key was woken")
	default:
	}
	if err := peer.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-chB: // Close wakes its subscribers, who then poll.
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a subscriber parked")
	}
	if _, _, err := pn.Subscribe(ctx, "test", b); err == nil {
		t.Fatal("Subscribe after Close succeeded")
	}
}

// mustSubscribe subscribes to keyHash, retrying while the store's
// listener connects.
func mustSubscribe(t testing.TB, n store.Notifier, keyHash string) (<-chan struct{}, func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch, cancel, err := n.Subscribe(context.Background(), "test", keyHash)
		if err == nil {
			return ch, cancel
		}
		if time.Now().After(deadline) {
			t.Fatalf("Subscribe: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spy passes calls to a store that notifies, and counts reservations
// (a waiter parks after its second: one finds the key held, one more once
// subscribed) and notes when the last Complete returned.
type spy struct {
	store.Store
	n         store.Notifier
	reserves  atomic.Int64
	completed atomic.Int64 // unix ns
}

func newSpy(s store.Store) *spy { return &spy{Store: s, n: s.(store.Notifier)} }

func (s *spy) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	defer s.reserves.Add(1)
	return s.Store.Reserve(ctx, req)
}

func (s *spy) Complete(ctx context.Context, c store.Completion) error {
	err := s.Store.Complete(ctx, c)
	if err == nil {
		s.completed.Store(time.Now().UnixNano())
	}
	return err
}

func (s *spy) Notify(ctx context.Context, scope, keyHash string) error {
	return s.n.Notify(ctx, scope, keyHash)
}

func (s *spy) Subscribe(ctx context.Context, scope, keyHash string) (<-chan struct{}, func(), error) {
	return s.n.Subscribe(ctx, scope, keyHash)
}

// recordSpy is a spy over a store.RecordNotifier, which it stays.
type recordSpy struct{ *spy }

func (s recordSpy) NotifyRecord(ctx context.Context, rec store.Record) error {
	return s.n.(store.RecordNotifier).NotifyRecord(ctx, rec)
}

func (s recordSpy) SubscribeRecord(ctx context.Context, scope, keyHash string) (<-chan struct{}, func() *store.Record, func(), error) {
	return s.n.(store.RecordNotifier).SubscribeRecord(ctx, scope, keyHash)
}

// engineStore is the store the engines of RunWake run on: the spy, a
// RecordNotifier when its store is one.
func (s *spy) engineStore() store.Store {
	if _, ok := s.n.(store.RecordNotifier); ok {
		return recordSpy{s}
	}
	return s
}

// RunWake checks that callers waiting for a running call are woken when
// it ends, across two clients a and b of one backend as across two
// gateways, and reports how long after the holder's completion a waiter
// gets its replay (p50, p99, max) in process and across the clients. Both
// stores must implement store.Notifier.
func RunWake(t *testing.T, a, b store.Store) {
	sa, sb := newSpy(a), newSpy(b)
	p := idem.Policy{Wait: time.Hour, CleanupInterval: -1}
	// Polling once an hour: a waiter that returns was woken.
	noPolling := idem.WithWaitPolling(time.Hour, time.Hour)
	ea, eb := idem.New(sa.engineStore(), p, noPolling), idem.New(sb.engineStore(), p, noPolling)
	t.Cleanup(func() { ea.Close(); eb.Close() })
	// The first subscription starts a store's listener and waits for it a
	// little; a waiter that finds it not yet listening polls, which these
	// tests set to hours. Start both listeners first.
	for _, n := range []store.Notifier{sa, sb} {
		_, cancel := mustSubscribe(t, n, store.HashKey("test", "warm-up"))
		cancel()
	}

	t.Run("Woken", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			waiter *idem.Engine
			sub    *spy
		}{{"InProcess", ea, sa}, {"AcrossClients", eb, sb}} {
			t.Run(tc.name, func(t *testing.T) {
				key := uniqueKey(t)
				const waiters = 8
				lat := wakeOnce(t, ea, tc.waiter, tc.sub, sa, key, waiters)
				t.Logf("%d waiters woken %v after the completion", waiters, lat)
			})
		}
	})

	t.Run("Latency", func(t *testing.T) {
		rounds := 200
		if testing.Short() {
			rounds = 20
		}
		// The baseline, side by side: a waiter on the second client that
		// cannot be notified (the store hidden behind a plain store.Store)
		// and polls as every waiter did before, from 5 ms doubling to 250 ms.
		polling := idem.New(struct{ store.Store }{sb}, p)
		defer polling.Close()
		type variant struct {
			name   string
			waiter *idem.Engine
			sub    *spy
		}
		variants := []variant{{"InProcess", ea, sa}, {"AcrossClients", eb, sb}, {"AcrossClientsPolling", polling, sb}}
		if _, ok := sb.n.(store.RecordNotifier); ok {
			// A store whose notifications carry the record: the waiter
			// that reads it instead (the spy hides RecordNotifier), side
			// by side. The holder still sends the record; the waiter
			// ignores it.
			keyOnly := idem.New(sb, p, noPolling)
			defer keyOnly.Close()
			variants = append(variants, variant{"AcrossClientsReading", keyOnly, sb})
		}
		// The variants alternate round by round, so that load on a shared
		// machine falls on all of them alike.
		lats := make([][]time.Duration, len(variants))
		for i := range rounds {
			for j, tc := range variants {
				key := fmt.Sprintf("%s-%s-%d", uniqueKey(t), tc.name, i)
				lats[j] = append(lats[j], wakeOnce(t, ea, tc.waiter, tc.sub, sa, key, 1))
			}
		}
		for j, tc := range variants {
			l := lats[j]
			slices.Sort(l)
			q := func(f float64) time.Duration { return l[int(f*float64(len(l)-1))] }
			t.Logf("%s: replay after the holder's completion over %d rounds: p50 %v, p99 %v, max %v (load average %s)",
				tc.name, rounds, q(0.5), q(0.99), l[len(l)-1], loadAverage())
		}
	})
}

// wakeOnce runs one holder on eh and n waiters on ew for key, ends the
// holder once the waiters are parked, and returns how long after the
// holder's completion the slowest waiter got its replay.
func wakeOnce(t *testing.T, eh, ew *idem.Engine, sub, hold *spy, key string, n int) time.Duration {
	t.Helper()
	call := idem.Call{Scope: "test", Key: key, Fingerprint: "fp", RequestID: "req-1"}
	started, finish := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := eh.Do(context.Background(), call, func(context.Context) ([]byte, error) {
			close(started)
			<-finish
			return []byte("charged"), nil
		})
		held <- err
	}()
	<-started
	parkedAt := sub.reserves.Load() + int64(2*n)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		last    time.Time
		errs    []error
		ran     atomic.Int32
		ctx, cn = context.WithTimeout(context.Background(), 20*time.Second)
	)
	defer cn()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := ew.Do(ctx, call, func(context.Context) ([]byte, error) { ran.Add(1); return nil, nil })
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if now.After(last) {
				last = now
			}
			if err == nil && (!res.Replayed || string(res.Value) != "charged") {
				err = fmt.Errorf("waiter got %q replayed=%v", res.Value, res.Replayed)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); sub.reserves.Load() < parkedAt; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			close(finish)
			t.Fatal("the waiters never parked")
		}
	}
	close(finish)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("waiters (not woken if the context deadline passed): %v", err)
	}
	if ran.Load() != 0 {
		t.Fatalf("a waiter ran the operation %d times", ran.Load())
	}
	return last.Sub(time.Unix(0, hold.completed.Load()))
}

// loadAverage returns the one-minute load average where the system tells
// it (Linux), to print next to a figure taken on a shared machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// testPausedHolder: a holder whose process stops (SIGSTOP, a long GC
// pause, a VM suspended) sends no renewals; it counts its own lease over
// first and cancels its operation's context, a retry through another
// client takes the key over and completes it, then the first resumes. It
// gets its value back marked NotRecorded with ErrLeaseLost, and the record
// keeps the second call's outcome.
func testPausedHolder(t *testing.T, h Harness) {
	s := newStore(t, h)
	peer := s
	if h.Peer != nil {
		peer = h.Peer(t, s)
		t.Cleanup(func() { _ = peer.Close() })
	}
	const lease = 500 * time.Millisecond
	p := idem.Policy{Lease: lease, TTL: time.Hour, CleanupInterval: -1}
	frozen := &pausable{Store: s}
	gw1, gw2 := idem.New(frozen, p), idem.New(peer, p)
	defer gw1.Close()
	defer gw2.Close()
	call := idem.Call{Scope: "test", Key: uniqueKey(t), Fingerprint: "fp", RequestID: "req-1"}
	paused, resume := make(chan struct{}), make(chan struct{})
	type outcome struct {
		res   idem.Result
		err   error
		cause error // of the operation's context when it resumed
	}
	first := make(chan outcome, 1)
	go func() {
		var cause error
		res, err := gw1.Do(context.Background(), call, func(ctx context.Context) ([]byte, error) {
			frozen.paused.Store(true)
			close(paused)
			<-resume
			// Its own count of the lease ends before the store's, by
			// a twentieth of the lease; on a machine short of CPU the
			// timer that cancels the context may still be due when
			// the holder resumes, but not a lease later.
			select {
			case <-ctx.Done():
			case <-time.After(2 * lease):
			}
			cause = context.Cause(ctx)
			return []byte("A"), nil
		})
		first <- outcome{res, err, cause}
	}()
	<-paused
	call.RequestID = "req-2"
	var res idem.Result
	eventually(t, 20*lease+10*time.Second, lease/4, "takeover of the paused holder's key", func() bool {
		var err error
		res, err = gw2.Do(context.Background(), call, func(context.Context) ([]byte, error) { return []byte("B"), nil })
		if errors.Is(err, idem.ErrInProgress) {
			return false
		}
		if err != nil || !res.TookOver || string(res.Value) != "B" {
			close(resume)
			<-first
			t.Fatalf("takeover: %+v %v", res, err)
		}
		return true
	})
	close(resume)
	o := <-first
	if !errors.Is(o.cause, idem.ErrLeaseLost) {
		t.Fatalf("the paused holder's context: cause %v, want ErrLeaseLost (the holder knows first)", o.cause)
	}
	if !errors.Is(o.err, idem.ErrLeaseLost) || !o.res.NotRecorded || string(o.res.Value) != "A" {
		t.Fatalf("paused holder: %+v %v, want A, NotRecorded, ErrLeaseLost", o.res, o.err)
	}
	for _, eng := range []*idem.Engine{gw1, gw2} {
		res, err := eng.Do(context.Background(), call, func(context.Context) ([]byte, error) { return []byte("C"), nil })
		if err != nil || !res.Replayed || string(res.Value) != "B" {
			t.Fatalf("retry after the pause: %+v %v, want B replayed", res, err)
		}
	}
}

// pausable is a client of a store whose renewals stop going out while
// paused is set, as a stopped process's do.
type pausable struct {
	store.Store
	paused atomic.Bool
}

func (p *pausable) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	if p.paused.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Store.Renew(ctx, f, lease)
}

// testOutcomeUnknown: a call whose outcome is unknown leaves its key failed
// with the engine's mark, which the store keeps through its value; a retry
// through another client gets the outcome_unknown conflict, and an
// operator's Release frees the key.
func testOutcomeUnknown(t *testing.T, h Harness) {
	s := newStore(t, h)
	peer := s
	if h.Peer != nil {
		peer = h.Peer(t, s)
		t.Cleanup(func() { _ = peer.Close() })
	}
	p := idem.Policy{CleanupInterval: -1}
	gw1, gw2 := idem.New(s, p), idem.New(peer, p)
	defer gw1.Close()
	defer gw2.Close()
	ctx := context.Background()
	call := idem.Call{Scope: "test", Key: uniqueKey(t), Fingerprint: "fp", RequestID: "req-1"}
	_, err := gw1.Do(ctx, call, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("upstream: no answer: %w", idem.ErrOutcomeUnknown)
	})
	if !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v", err)
	}
	call.RequestID = "req-2"
	ran := 0
	op := func(context.Context) ([]byte, error) { ran++; return []byte("ok"), nil }
	_, err = gw2.Do(ctx, call, op)
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Type != idem.ConflictOutcomeUnknown || ce.Record.RequestID != "req-1" || ran != 0 {
		t.Fatalf("retry: %v (ran %d), want outcome_unknown naming req-1", err, ran)
	}
	if err := gw2.Release(ctx, "test", call.Key); err != nil {
		t.Fatalf("operator release: %v", err)
	}
	if res, err := gw1.Do(ctx, call, op); err != nil || res.Replayed || ran != 1 {
		t.Fatalf("after release: %+v %v (ran %d)", res, err, ran)
	}
	if err := gw2.Release(ctx, "test", call.Key); !errors.Is(err, idem.ErrNotReleasable) {
		t.Fatalf("release of a succeeded key: %v", err)
	}
}
