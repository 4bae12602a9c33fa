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

// forgetful loses a reservation just before its completion, as a failover
// to a replica that never received the reservation does: every one when
// always is set, else the first of each key only.
type forgetful struct {
	store.Store
	always bool
	lost   sync.Map // key hashes whose reservation it lost
}

func (f *forgetful) Complete(ctx context.Context, c store.Completion) error {
	if _, again := f.lost.LoadOrStore(c.KeyHash, true); !again || f.always {
		if err := f.Store.Release(ctx, c.Fence); err != nil {
			return err
		}
	}
	return f.Store.Complete(ctx, c)
}

// TestRecordLost: a holder whose record the store lost writes its outcome
// back as a new record, is answered as recorded once it landed, and a
// retry replays it without running the key again; WithOnRecordLost counts
// the loss. A write-back lost too is not written back again: the holder
// is answered as a lost lease, never as recorded. A holder whose key
// another caller took over is not counted.
func TestRecordLost(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	onLost := idem.WithOnRecordLost(func(scope string) {
		if scope == "charges" {
			lost.Add(1)
		}
	})
	eng := idem.New(&forgetful{Store: memory.New()}, idem.Policy{CleanupInterval: -1}, quiet, onLost)
	defer eng.Close()
	op := &counter{value: "v"}
	res, err := eng.Do(bg, call("k"), op.fn)
	if err != nil || res.NotRecorded || string(res.Value) != "v#1" {
		t.Fatalf("completion of a lost record: %+v, %v; want the outcome written back and answered as recorded", res, err)
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("WithOnRecordLost's hook ran %d times; want 1", n)
	}
	res, err = eng.Do(bg, call("k"), op.fn)
	if err != nil || !res.Replayed || string(res.Value) != "v#1" || op.n.Load() != 1 {
		t.Fatalf("retry after a write-back: %+v, %v, ran %d; want v#1 replayed, one run", res, err, op.n.Load())
	}

	// Lost again: the write-back's own record is lost too.
	lost.Store(0)
	eng1 := idem.New(&forgetful{Store: memory.New(), always: true}, idem.Policy{CleanupInterval: -1}, quiet, onLost)
	defer eng1.Close()
	op = &counter{value: "v"}
	res, err = eng1.Do(bg, call("k"), op.fn)
	if !errors.Is(err, idem.ErrLeaseLost) || !res.NotRecorded || res.Kept || op.n.Load() != 1 {
		t.Fatalf("completion of a record lost twice: %+v, %v, ran %d; want ErrLeaseLost, NotRecorded", res, err, op.n.Load())
	}
	if n := lost.Load(); n != 2 {
		t.Fatalf("WithOnRecordLost's hook ran %d times for a record and its write-back lost; want 2", n)
	}

	// A key taken over by another caller is a lost lease, not a lost
	// record.
	lost.Store(0)
	s := memory.New()
	eng2 := idem.New(s, idem.Policy{CleanupInterval: -1}, quiet, onLost)
	defer eng2.Close()
	_, err = eng2.Do(bg, call("k2"), func(ctx context.Context) ([]byte, error) {
		r, _ := s.Get(ctx, "charges", store.HashKey("charges", "k2"))
		// Another holder's reservation replaces this one's.
		if err := s.Release(ctx, store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: r.Token}); err != nil {
			return nil, err
		}
		r.Token++
		if _, err := s.Reserve(ctx, store.ReserveRequest{Record: r, Lease: idem.DefaultLease, TTL: idem.DefaultTTL}); err != nil {
			return nil, err
		}
		return []byte("v"), nil
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("completion of a key taken over: %v; want ErrLeaseLost", err)
	}
	if n := lost.Load(); n != 0 {
		t.Fatalf("WithOnRecordLost's hook ran %d times for a takeover", n)
	}
}

// racing loses each key's first reservation before its completion, as
// forgetful does, and runs beforeWriteBack when its holder's check finds
// the key absent: the moment a new call can reserve it first.
type racing struct {
	forgetful
	beforeWriteBack func()
	once            sync.Once
}

func (r *racing) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	rec, err := r.forgetful.Get(ctx, scope, keyHash)
	if errors.Is(err, store.ErrNotFound) {
		r.once.Do(r.beforeWriteBack)
	}
	return rec, err
}

// TestRecordLostWriteBackLosesTheRace: a new call that reserves the key
// between the holder's finding its record lost and its write-back runs
// the key again; the holder's outcome is dropped (ErrLeaseLost,
// NotRecorded), the loss counted, and the new call's outcome is the key's.
func TestRecordLostWriteBackLosesTheRace(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	st := &racing{forgetful: forgetful{Store: memory.New()}}
	eng := idem.New(st, idem.Policy{CleanupInterval: -1}, quiet, idem.WithOnRecordLost(func(string) { lost.Add(1) }))
	defer eng.Close()
	op := &counter{value: "v"}
	started, finish := make(chan struct{}), make(chan struct{})
	second := make(chan error, 1)
	st.beforeWriteBack = func() {
		go func() {
			res, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
				close(started)
				<-finish
				return op.fn(ctx)
			})
			if err == nil && (res.Replayed || string(res.Value) != "v#2") {
				err = errors.New("the new call was answered " + string(res.Value))
			}
			second <- err
		}()
		<-started
	}
	res, err := eng.Do(bg, call("k"), op.fn)
	if !errors.Is(err, idem.ErrLeaseLost) || !res.NotRecorded || res.Kept {
		t.Fatalf("holder whose write-back lost the race: %+v, %v; want ErrLeaseLost, NotRecorded", res, err)
	}
	close(finish)
	if err := <-second; err != nil {
		t.Fatalf("the call that reserved first: %v", err)
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("WithOnRecordLost's hook ran %d times; want 1", n)
	}
	res, err = eng.Do(bg, call("k"), op.fn)
	if err != nil || !res.Replayed || string(res.Value) != "v#2" || op.n.Load() != 2 {
		t.Fatalf("retry: %+v, %v, ran %d; want the new call's v#2 replayed, two runs", res, err, op.n.Load())
	}
}

// down refuses reservations while set, as a store in a failover does.
type down struct {
	*racing
	refuse atomic.Bool
}

func (d *down) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	if d.refuse.Load() {
		return store.Reservation{}, errors.New("connection refused")
	}
	return d.racing.Reserve(ctx, req)
}

// TestRecordLostWriteBackPending: a write-back the store refuses is kept:
// the holder is answered NotRecorded and Kept (ErrStoreUnavailable), a
// retry in this process replays the kept outcome, and the outcome is
// written once the store accepts.
func TestRecordLostWriteBackPending(t *testing.T) {
	t.Parallel()
	st := &down{racing: &racing{forgetful: forgetful{Store: memory.New()}}}
	st.beforeWriteBack = func() { st.refuse.Store(true) }
	eng := idem.New(st, idem.Policy{CleanupInterval: -1}, quiet)
	defer eng.Close()
	op := &counter{value: "v"}
	res, err := eng.Do(bg, call("k"), op.fn)
	if !errors.Is(err, idem.ErrStoreUnavailable) || !res.NotRecorded || !res.Kept || eng.Kept() != 1 {
		t.Fatalf("write-back refused: %+v, %v, %d kept; want ErrStoreUnavailable, NotRecorded, Kept", res, err, eng.Kept())
	}
	res, err = eng.Do(bg, call("k"), op.fn)
	if err != nil || !res.Replayed || string(res.Value) != "v#1" || op.n.Load() != 1 {
		t.Fatalf("retry while the write-back waits: %+v, %v, ran %d; want the kept v#1", res, err, op.n.Load())
	}
	st.refuse.Store(false)
	for eng.Kept() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	rec, err := st.Get(bg, "charges", store.HashKey("charges", "k"))
	if err != nil || rec.State != store.Succeeded || string(rec.Value) != "v#1" {
		t.Fatalf("the store after the write-back: %+v, %v; want v#1 succeeded", rec, err)
	}
}
