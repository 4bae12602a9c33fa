package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

type bundle struct {
	store *memory.Store
	clock *testkit.Clock
	eng   *idem.Engine
}

func setup(t *testing.T, p idem.Policy) *bundle {
	t.Helper()
	// The store and the engine read one stepped clock, so that tests pass
	// leases and lifetimes without sleeping.
	clock := testkit.NewClock()
	b := &bundle{store: memory.New(memory.WithClock(clock.Now)), clock: clock}
	if p.CleanupInterval == 0 {
		p.CleanupInterval = -1
	}
	b.eng = idem.New(b.store, p, idem.WithClock(b.clock.Now))
	t.Cleanup(func() { b.eng.Close() })
	return b
}

// counter is an operation that counts its executions.
type counter struct {
	n     atomic.Int32
	value string
	err   error
}

func (c *counter) fn(ctx context.Context) ([]byte, error) {
	n := c.n.Add(1)
	if c.err != nil {
		return nil, c.err
	}
	return fmt.Appendf(nil, "%s#%d", c.value, n), nil
}

var (
	bg    = context.Background()
	quiet = idem.WithLogger(slog.New(slog.DiscardHandler))
)

func call(key string) idem.Call {
	return idem.Call{Scope: "charges", Key: key, Fingerprint: "fp", Binding: "POST /charges", RequestID: "req-" + key}
}

func TestFirstCallThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	op := &counter{value: "ch"}
	first, err := b.eng.Do(bg, call("k1"), op.fn)
	if err != nil || first.Replayed || string(first.Value) != "ch#1" || first.State != idem.Succeeded {
		t.Fatalf("first: %+v %v", first, err)
	}
	c := call("k1")
	c.RequestID = "req-retry"
	again, err := b.eng.Do(bg, c, op.fn)
	if err != nil || !again.Replayed || string(again.Value) != "ch#1" {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if again.RequestID != "req-k1" {
		t.Fatalf("replay request id %q, want the first call's", again.RequestID)
	}
	// Keys are trimmed before use: " k1 " is k1.
	if r, err := b.eng.Do(bg, call(" k1\t"), op.fn); err != nil || !r.Replayed {
		t.Fatalf("trimmed key: %+v %v", r, err)
	}
	if n := op.n.Load(); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
}

func TestRaceExecutesOnce(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Policy{Wait: wait})
			var runs atomic.Int32
			release := make(chan struct{})
			op := func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				<-release
				return []byte("done"), nil
			}
			const n = 200
			var mu sync.Mutex
			outcomes := map[string]int{}
			raced := make(chan struct{})
			go func() {
				defer close(raced)
				testkit.FanOut(n, func(int) {
					res, err := b.eng.Do(bg, call("race"), op)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, idem.ErrInProgress):
						outcomes["in_progress"]++
					case err != nil:
						outcomes["error: "+err.Error()]++
					case res.Replayed:
						outcomes["replayed "+string(res.Value)]++
					default:
						outcomes["ran "+string(res.Value)]++
					}
				})
			}()
			// Let every racer reach the store before the winner finishes.
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				settled := outcomes["in_progress"]
				mu.Unlock()
				if wait > 0 || settled == n-1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if wait > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			close(release)
			<-raced
			if r := runs.Load(); r != 1 {
				t.Fatalf("operation ran %d times, want 1; outcomes %v", r, outcomes)
			}
			if outcomes["ran done"] != 1 {
				t.Fatalf("outcomes %v", outcomes)
			}
			if wait == 0 && outcomes["in_progress"] != n-1 {
				t.Fatalf("without waiting, the others must get in_progress: %v", outcomes)
			}
			if wait > 0 && outcomes["replayed done"] != n-1 {
				t.Fatalf("waiting callers must get the replay: %v", outcomes)
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	op := &counter{value: "v"}
	if _, err := b.eng.Do(bg, call("k"), op.fn); err != nil {
		t.Fatal(err)
	}
	other := call("k")
	other.Fingerprint = "fp2"
	_, err := b.eng.Do(bg, other, op.fn)
	var ce *idem.ConflictError
	if !errors.Is(err, idem.ErrFingerprintMismatch) || !errors.As(err, &ce) || ce.Type != idem.ConflictPayloadMismatch {
		t.Fatalf("other fingerprint: %v", err)
	}
	rebound := call("k")
	rebound.Binding = "POST /refunds"
	if _, err := b.eng.Do(bg, rebound, op.fn); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("other binding: %v", err)
	}
	// A different scope is a different key.
	elsewhere := call("k")
	elsewhere.Scope = "refunds"
	elsewhere.Fingerprint = "fp2"
	if r, err := b.eng.Do(bg, elsewhere, op.fn); err != nil || r.Replayed {
		t.Fatalf("other scope: %+v %v", r, err)
	}
	if n := op.n.Load(); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
}

func TestInvalidKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{MaxKeyBytes: 200})
	op := &counter{}
	for _, k := range []string{"", "   ", "\t\n", strings.Repeat("x", 201), "a\x00b", "a\nb", "bad\xffutf8", "a\u2028b"} {
		if _, err := b.eng.Do(bg, call(k), op.fn); !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("key %q: %v, want ErrInvalidKey", k, err)
		}
	}
	for _, k := range []string{strings.Repeat("x", 200), "  " + strings.Repeat("x", 200) + "  ", "ü-ключ-鍵", `a "quoted" key`} {
		if _, err := b.eng.Do(bg, call(k), op.fn); err != nil {
			t.Errorf("key %q: %v", k, err)
		}
	}
	if op.n.Load() != 3 {
		t.Fatalf("ran %d, want 3 (two spellings of one key)", op.n.Load())
	}
}

func TestOnFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("card declined")
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idem.Policy{OnFailure: idem.OnFailureRelease})
		op := &counter{err: boom}
		for i := range 3 {
			_, err := b.eng.Do(bg, call("k"), op.fn)
			if !errors.Is(err, boom) {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if op.n.Load() != 3 {
			t.Fatalf("ran %d times, want 3: a released failure runs again", op.n.Load())
		}
		if b.store.Len() != 0 {
			t.Fatalf("%d records left", b.store.Len())
		}
	})
	for _, pol := range []idem.OnFailure{idem.OnFailureCache, idem.OnFailureConflict} {
		t.Run(pol.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Policy{OnFailure: pol})
			op := &counter{err: &idem.Failure{Value: []byte(`{"error":"card_declined"}`), Err: boom}}
			res, err := b.eng.Do(bg, call("k"), op.fn)
			if !errors.Is(err, boom) || res.Replayed || res.State != idem.Failed {
				t.Fatalf("first: %+v %v", res, err)
			}
			for range 2 {
				res, err = b.eng.Do(bg, call("k"), op.fn)
				var ce *idem.ConflictError
				if !errors.Is(err, idem.ErrPreviousFailure) || !errors.As(err, &ce) {
					t.Fatalf("retry: %v", err)
				}
				if !res.Replayed || res.State != idem.Failed || string(res.Value) != `{"error":"card_declined"}` || string(ce.Record.Value) != string(res.Value) {
					t.Fatalf("retry result %+v", res)
				}
			}
			if op.n.Load() != 1 {
				t.Fatalf("ran %d times, want 1", op.n.Load())
			}
		})
	}
	t.Run("plain error message is kept", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idem.Policy{OnFailure: idem.OnFailureConflict})
		op := &counter{err: boom}
		b.eng.Do(bg, call("k"), op.fn)
		res, _ := b.eng.Do(bg, call("k"), op.fn)
		if string(res.Value) != "card declined" {
			t.Fatalf("stored failure %q", res.Value)
		}
	})
}

func TestStaleTakeoverAndFencing(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: time.Minute})
	holding := make(chan struct{})
	resume := make(chan struct{})
	var firstErr error
	var firstCtxErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, firstErr = b.eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			close(holding)
			<-resume
			firstCtxErr = context.Cause(ctx)
			return []byte("stale holder"), nil
		})
	}()
	<-holding
	// While the lease is live, a retry is told the call is in progress.
	if _, err := b.eng.Do(bg, call("k"), (&counter{}).fn); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("during lease: %v", err)
	}
	// The holder stops renewing (its clock says so): the record is stale.
	b.clock.Add(2 * time.Minute)
	// Another request with the same key does not take it over.
	other := call("k")
	other.Fingerprint = "other"
	if _, err := b.eng.Do(bg, other, (&counter{}).fn); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("stale, other request: %v", err)
	}
	taker := &counter{value: "taker"}
	res, err := b.eng.Do(bg, call("k"), taker.fn)
	if err != nil || !res.TookOver || res.Replayed || string(res.Value) != "taker#1" {
		t.Fatalf("takeover: %+v %v", res, err)
	}
	close(resume)
	<-done
	if !errors.Is(firstErr, idem.ErrLeaseLost) {
		t.Fatalf("the stale holder's completion: %v, want ErrLeaseLost", firstErr)
	}
	_ = firstCtxErr
	res, err = b.eng.Do(bg, call("k"), (&counter{}).fn)
	if err != nil || !res.Replayed || string(res.Value) != "taker#1" {
		t.Fatalf("after fencing, replay: %+v %v", res, err)
	}
}

func TestOnStaleConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: time.Minute, OnStale: idem.OnStaleConflict})
	rec := store.ReserveRequest{Record: store.Record{
		KeyHash: store.HashKey("charges", "k"), Scope: "charges", Key: "k", Fingerprint: "fp",
		Binding: "POST /charges", State: store.InProgress, Token: 7,
	}, Lease: time.Minute, TTL: time.Hour}
	if _, err := b.store.Reserve(bg, rec); err != nil { // a holder that died
		t.Fatal(err)
	}
	b.clock.Add(5 * time.Minute)
	_, err := b.eng.Do(bg, call("k"), (&counter{}).fn)
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Type != idem.ConflictInProgress || !ce.Stale {
		t.Fatalf("stale under OnStaleConflict: %v", err)
	}
	// It expires with its TTL, and then the key is free.
	b.clock.Add(time.Hour)
	if r, err := b.eng.Do(bg, call("k"), (&counter{}).fn); err != nil || r.Replayed {
		t.Fatalf("after expiry: %+v %v", r, err)
	}
}

func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	// Real clock: the holder runs for several lease periods, renewing, and
	// nobody takes it over.
	eng := idem.New(memory.New(), idem.Policy{Lease: 300 * time.Millisecond, CleanupInterval: -1})
	defer eng.Close()
	var runs atomic.Int32
	done := make(chan error)
	go func() {
		_, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			time.Sleep(time.Second)
			return []byte("v"), nil
		})
		done <- err
	}()
	for i := 0; i < 8; i++ {
		time.Sleep(100 * time.Millisecond)
		if _, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		}); err != nil && !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("retry %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times: a renewed lease was taken over", runs.Load())
	}
}

// faulty wraps a store and injects errors.
type faulty struct {
	store.Store
	reserveErr  error
	loseReserve atomic.Bool  // apply each Reserve, then report it failed: its answer lost
	completeErr atomic.Int32 // fail this many Complete calls
	releaseErr  atomic.Int32 // fail this many Release calls
	releases    atomic.Int32 // Release calls
	renewErr    error
	cleanups    atomic.Int32
}

func (f *faulty) Reserve(ctx context.Context, r store.ReserveRequest) (store.Reservation, error) {
	if f.reserveErr != nil {
		return store.Reservation{}, f.reserveErr
	}
	res, err := f.Store.Reserve(ctx, r)
	if err == nil && f.loseReserve.Load() {
		return store.Reservation{}, errors.New("read tcp 127.0.0.1:6379: EOF")
	}
	return res, err
}

func (f *faulty) Release(ctx context.Context, fe store.Fence) error {
	f.releases.Add(1)
	if f.releaseErr.Add(-1) >= 0 {
		return errors.New("dial tcp 127.0.0.1:6379: connection refused")
	}
	return f.Store.Release(ctx, fe)
}

func (f *faulty) Complete(ctx context.Context, c store.Completion) error {
	if f.completeErr.Add(-1) >= 0 {
		return errors.New("connection reset")
	}
	return f.Store.Complete(ctx, c)
}

func (f *faulty) Renew(ctx context.Context, fe store.Fence, lease time.Duration) error {
	if f.renewErr != nil {
		return f.renewErr
	}
	return f.Store.Renew(ctx, fe, lease)
}

func (f *faulty) Cleanup(ctx context.Context, limit int) (int, error) {
	f.cleanups.Add(1)
	return f.Store.Cleanup(ctx, limit)
}

func TestStoreErrors(t *testing.T) {
	t.Parallel()
	down := errors.New("dial tcp: connection refused")
	t.Run("fail closed", func(t *testing.T) {
		t.Parallel()
		eng := idem.New(&faulty{Store: memory.New(), reserveErr: down}, idem.Policy{CleanupInterval: -1}, quiet)
		op := &counter{}
		_, err := eng.Do(bg, call("k"), op.fn)
		if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, down) || op.n.Load() != 0 {
			t.Fatalf("%v, ran %d", err, op.n.Load())
		}
	})
	t.Run("fail open", func(t *testing.T) {
		t.Parallel()
		eng := idem.New(&faulty{Store: memory.New(), reserveErr: down}, idem.Policy{CleanupInterval: -1, OnStoreError: idem.OnStoreErrorFailOpen}, quiet)
		op := &counter{value: "v"}
		res, err := eng.Do(bg, call("k"), op.fn)
		if err != nil || !res.Unprotected || op.n.Load() != 1 {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("completion retried", func(t *testing.T) {
		t.Parallel()
		f := &faulty{Store: memory.New()}
		f.completeErr.Store(2)
		eng := idem.New(f, idem.Policy{CleanupInterval: -1}, quiet)
		op := &counter{value: "v"}
		if _, err := eng.Do(bg, call("k"), op.fn); err != nil {
			t.Fatal(err)
		}
		if r, err := eng.Do(bg, call("k"), op.fn); err != nil || !r.Replayed {
			t.Fatalf("after retried completion: %+v %v", r, err)
		}
	})
	t.Run("lost lease cancels the operation", func(t *testing.T) {
		t.Parallel()
		f := &faulty{Store: memory.New(), renewErr: store.ErrLeaseLost}
		eng := idem.New(f, idem.Policy{CleanupInterval: -1, Lease: 30 * time.Millisecond, TTL: time.Hour})
		_, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(10 * time.Second):
				return nil, errors.New("never canceled")
			}
		})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("%v", err)
		}
	})
}

func TestCanceledCallerStillCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	ctx, cancel := context.WithCancel(bg)
	if _, err := b.eng.Do(ctx, call("k"), func(ctx context.Context) ([]byte, error) {
		cancel() // the client hangs up as the work finishes
		return []byte("charged"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.eng.Do(bg, call("k"), (&counter{}).fn); err != nil || !r.Replayed || string(r.Value) != "charged" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestTTLAndCleanupThrottle(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	f := &faulty{Store: memory.New(memory.WithClock(clk.Now))}
	newEngine := func() *idem.Engine {
		e := idem.New(f, idem.Policy{TTL: 7 * 24 * time.Hour, CleanupInterval: 300 * time.Second}, idem.WithClock(clk.Now))
		t.Cleanup(func() { e.Close() })
		return e
	}
	// cleanups waits for eng's running cleanup and reads the count.
	cleanups := func(eng *idem.Engine) int32 { eng.Close(); return f.cleanups.Swap(0) }
	op := &counter{value: "v"}

	// Every call may trigger cleanup, but not more than once per interval.
	eng := newEngine()
	for i := range 50 {
		eng.Do(bg, call(fmt.Sprintf("k%d", i)), op.fn)
		clk.Add(time.Second)
	}
	if n := cleanups(eng); n != 1 {
		t.Fatalf("50 calls in 50 s: %d cleanups, want 1", n)
	}
	eng = newEngine()
	eng.Do(bg, call("k0"), op.fn) // a replay
	idem.WaitCleanup(eng)
	clk.Add(299 * time.Second)
	eng.Do(bg, call("k0"), op.fn)
	idem.WaitCleanup(eng)
	clk.Add(2 * time.Second)
	eng.Do(bg, call("k0"), op.fn)
	if n := cleanups(eng); n != 2 {
		t.Fatalf("calls at 0, 299 and 301 s: %d cleanups, want 2", n)
	}
	if op.n.Load() != 50 {
		t.Fatalf("ran %d, want 50", op.n.Load())
	}

	// Seven days later the records are absent for readers, and the cleanup
	// the next call triggers removes them.
	clk.Add(7 * 24 * time.Hour)
	eng = newEngine()
	if r, err := eng.Do(bg, call("k0"), op.fn); err != nil || r.Replayed {
		t.Fatalf("after TTL: %+v %v", r, err)
	}
	cleanups(eng)
	if n := f.Store.(*memory.Store).Len(); n != 1 {
		t.Fatalf("%d records after cleanup, want 1 (the fresh k0)", n)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	bad := []idem.Policy{
		{TTL: -1}, {Lease: time.Hour, TTL: time.Minute}, {Lease: time.Millisecond},
		{OnFailure: 7}, {OnStale: 3}, {Wait: -time.Second}, {MaxKeyBytes: -1},
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if err := (idem.Policy{Wait: idem.NoWait}).Validate(); err != nil {
		t.Errorf("NoWait: %v", err)
	}
	if err := (idem.Policy{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// lostReply performs each write, then (once per kind) reports a network
// error as if the reply was lost; a retry then finds its own write done.
type lostReply struct {
	store.Store
	completeLost, reserveRetried atomic.Bool
}

func (l *lostReply) Complete(ctx context.Context, c store.Completion) error {
	if err := l.Store.Complete(ctx, c); err != nil {
		return err
	}
	if l.completeLost.CompareAndSwap(false, true) {
		return errors.New("read tcp: connection reset by peer")
	}
	return nil
}

// Reserve behaves like a client that retried a reserve whose first try
// succeeded: the second try reports the record as existing, with our token.
func (l *lostReply) Reserve(ctx context.Context, r store.ReserveRequest) (store.Reservation, error) {
	res, err := l.Store.Reserve(ctx, r)
	if err == nil && res.Acquired && l.reserveRetried.CompareAndSwap(false, true) {
		return l.Store.Reserve(ctx, r)
	}
	return res, err
}

func TestLostRepliesAreNotLostLeases(t *testing.T) {
	t.Parallel()
	l := &lostReply{Store: memory.New()}
	eng := idem.New(l, idem.Policy{CleanupInterval: -1}, quiet)
	op := &counter{value: "v"}
	res, err := eng.Do(bg, call("k"), op.fn)
	if err != nil || res.Replayed || string(res.Value) != "v#1" {
		t.Fatalf("%+v %v", res, err)
	}
	if !l.completeLost.Load() || !l.reserveRetried.Load() {
		t.Fatal("the faults were not injected")
	}
	if r, err := eng.Do(bg, call("k"), op.fn); err != nil || !r.Replayed || op.n.Load() != 1 {
		t.Fatalf("replay: %+v %v", r, err)
	}
}

func TestPolicyOverlay(t *testing.T) {
	t.Parallel()
	base := idem.Policy{TTL: time.Hour, Wait: time.Second, OnStoreError: idem.OnStoreErrorFailOpen}
	got := base.Overlay(idem.Policy{TTL: 7 * 24 * time.Hour, MaxKeyBytes: 200, OnFailure: idem.OnFailureConflict})
	want := idem.Policy{TTL: 7 * 24 * time.Hour, Wait: time.Second, MaxKeyBytes: 200, OnFailure: idem.OnFailureConflict, OnStoreError: idem.OnStoreErrorFailOpen}
	if got != want {
		t.Fatalf("Overlay = %+v, want %+v", got, want)
	}
	if base.Overlay(idem.Policy{}) != base {
		t.Fatal("an empty overlay changed the policy")
	}
}
