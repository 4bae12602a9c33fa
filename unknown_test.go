package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// errTimedOut is what the gateway's proxy returns when the payments API took
// the request and never answered.
var errTimedOut = fmt.Errorf("upstream did not answer within 5s: %w", idem.ErrOutcomeUnknown)

// wantUnknown checks that a retry of key runs nothing and gets the
// outcome_unknown conflict naming the first request.
func wantUnknown(t *testing.T, eng *idem.Engine, key string) {
	t.Helper()
	op := &counter{value: "again"}
	res, err := eng.Do(bg, call(key), op.fn)
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Type != idem.ConflictOutcomeUnknown || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("retry: %+v %v, want outcome_unknown conflict", res, err)
	}
	if op.n.Load() != 0 {
		t.Fatalf("retry ran the operation %d times", op.n.Load())
	}
	if ce.Record.RequestID != "req-"+key || res.RequestID != "req-"+key || !res.Replayed {
		t.Fatalf("retry does not name the first request: %+v %+v", ce.Record, res)
	}
	if errors.Is(err, idem.ErrPreviousFailure) {
		t.Fatalf("outcome_unknown also matches ErrPreviousFailure")
	}
}

func TestOutcomeUnknownIsNotReleased(t *testing.T) {
	t.Parallel()
	// Whatever OnFailure says: an unknown outcome is not a failure that
	// can be retried.
	for _, of := range []idem.OnFailure{idem.OnFailureRelease, idem.OnFailureCache, idem.OnFailureConflict} {
		t.Run(of.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Policy{OnFailure: of})
			res, err := b.eng.Do(bg, call("k"), func(context.Context) ([]byte, error) { return nil, errTimedOut })
			if !errors.Is(err, idem.ErrOutcomeUnknown) || res.Replayed || res.NotRecorded {
				t.Fatalf("first call: %+v %v", res, err)
			}
			wantUnknown(t, b.eng, "k")
			// The failure is kept for the operator, the marker is not shown.
			res, _ = b.eng.Do(bg, call("k"), (&counter{}).fn)
			if string(res.Value) != errTimedOut.Error() {
				t.Fatalf("replayed failure %q, want %q", res.Value, errTimedOut.Error())
			}
			rec, err := b.eng.Lookup(bg, "charges", "k")
			if err != nil {
				t.Fatal(err)
			}
			if !rec.OutcomeUnknown || string(rec.Value) != errTimedOut.Error() {
				t.Fatalf("Lookup: OutcomeUnknown %v, value %q", rec.OutcomeUnknown, rec.Value)
			}
		})
	}
}

func TestPlainFailureIsNotUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{OnFailure: idem.OnFailureConflict})
	b.eng.Do(bg, call("k"), (&counter{err: errors.New("card_declined")}).fn)
	_, err := b.eng.Do(bg, call("k"), (&counter{}).fn)
	if !errors.Is(err, idem.ErrPreviousFailure) || errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("%v, want previous_failure", err)
	}
	rec, _ := b.eng.Lookup(bg, "charges", "k")
	if rec.OutcomeUnknown || rec.Releasable() {
		t.Fatal("a plain failure reads as outcome unknown")
	}
}

func TestPanicAfterStartIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	var got any
	func() {
		defer func() { got = recover() }()
		b.eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) { panic("boom") })
	}()
	if got != "boom" {
		t.Fatalf("recovered %v, want the operation's own panic value", got)
	}
	wantUnknown(t, b.eng, "k")
}

func TestOnUnknownRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{OnUnknown: idem.OnUnknownRelease, OnFailure: idem.OnFailureConflict})
	if _, err := b.eng.Do(bg, call("k"), func(context.Context) ([]byte, error) { return nil, errTimedOut }); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	op := &counter{value: "v"}
	if res, err := b.eng.Do(bg, call("k"), op.fn); err != nil || res.Replayed || op.n.Load() != 1 {
		t.Fatalf("after release: %+v %v", res, err)
	}
	func() {
		defer func() { recover() }()
		b.eng.Do(bg, call("p"), func(ctx context.Context) ([]byte, error) { panic("boom") })
	}()
	if res, err := b.eng.Do(bg, call("p"), op.fn); err != nil || res.Replayed || op.n.Load() != 2 {
		t.Fatalf("after a panic under release: %+v %v", res, err)
	}
}

func TestOperatorRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: time.Minute, OnFailure: idem.OnFailureCache})
	b.eng.Do(bg, call("unknown"), func(context.Context) ([]byte, error) { return nil, errTimedOut })
	if err := b.eng.Release(bg, "charges", "unknown"); err != nil {
		t.Fatalf("release of an unknown outcome: %v", err)
	}
	op := &counter{value: "v"}
	if res, err := b.eng.Do(bg, call("unknown"), op.fn); err != nil || res.Replayed || op.n.Load() != 1 {
		t.Fatalf("after operator release: %+v %v", res, err)
	}
	// Now succeeded: never released this way.
	if err := b.eng.Release(bg, "charges", "unknown"); !errors.Is(err, idem.ErrNotReleasable) {
		t.Fatalf("release of a succeeded key: %v", err)
	}
	if res, err := b.eng.Do(bg, call("unknown"), op.fn); err != nil || !res.Replayed {
		t.Fatalf("succeeded key changed: %+v %v", res, err)
	}
	if err := b.eng.Release(bg, "charges", "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("release of an absent key: %v", err)
	}
	b.eng.Do(bg, call("declined"), (&counter{err: errors.New("card_declined")}).fn)
	if err := b.eng.Release(bg, "charges", "declined"); !errors.Is(err, idem.ErrNotReleasable) {
		t.Fatalf("release of a known failure: %v", err)
	}
	if err := b.eng.Release(bg, "charges", " "); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("release of an invalid key: %v", err)
	}

	// An in_progress key: not while its holder renews, yes once stale.
	// The released holder is alive: it finishes before any new call
	// reserves the key, finds its record gone and writes its outcome back
	// (a key that ran to its end must not run again), so the next call
	// replays it.
	late := holdKey(t, b, "held")
	if err := b.eng.Release(bg, "charges", "held"); !errors.Is(err, idem.ErrNotReleasable) {
		t.Fatalf("release of a live holder's key: %v", err)
	}
	b.clock.Add(2 * time.Minute)
	if err := b.eng.Release(bg, "charges", "held"); err != nil {
		t.Fatalf("release of a stale key: %v", err)
	}
	if res, err := late(); err != nil || res.NotRecorded || string(res.Value) != "late" {
		t.Fatalf("released holder finishing first: %+v %v; want its outcome written back, answered as recorded", res, err)
	}
	op = &counter{value: "again"}
	if res, err := b.eng.Do(bg, call("held"), op.fn); err != nil || !res.Replayed || string(res.Value) != "late" || op.n.Load() != 0 {
		t.Fatalf("after the released holder finished: %+v %v, ran %d; want its outcome replayed", res, err, op.n.Load())
	}

	// A new call that reserves the released key before its holder
	// finishes wins: it runs, and the holder's outcome is dropped.
	late = holdKey(t, b, "raced")
	b.clock.Add(2 * time.Minute)
	if err := b.eng.Release(bg, "charges", "raced"); err != nil {
		t.Fatalf("release of a stale key: %v", err)
	}
	if res, err := b.eng.Do(bg, call("raced"), op.fn); err != nil || res.Replayed || op.n.Load() != 1 {
		t.Fatalf("new call after release: %+v %v; want it run", res, err)
	}
	if res, err := late(); !errors.Is(err, idem.ErrLeaseLost) || !res.NotRecorded {
		t.Fatalf("released holder finishing after a new call: %+v %v; want ErrLeaseLost, NotRecorded", res, err)
	}
	if res, err := b.eng.Do(bg, call("raced"), op.fn); err != nil || !res.Replayed || string(res.Value) != "again#1" {
		t.Fatalf("after both: %+v %v; want the new call's outcome", res, err)
	}
}

// holdKey starts a call of key that runs until the returned function is
// called, which lets it finish and returns its answer.
func holdKey(t *testing.T, b *bundle, key string) func() (idem.Result, error) {
	t.Helper()
	started, finish := make(chan struct{}), make(chan struct{})
	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := b.eng.Do(bg, call(key), func(context.Context) ([]byte, error) {
			close(started)
			<-finish
			return []byte("late"), nil
		})
		done <- answer{res, err}
	}()
	<-started
	return func() (idem.Result, error) {
		close(finish)
		a := <-done
		return a.res, a.err
	}
}

func TestTokenFromContext(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	if _, ok := idem.TokenFromContext(bg); ok {
		t.Fatal("a token outside Do")
	}
	var tok uint64
	var rec store.Record
	_, err := b.eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
		var ok bool
		if tok, ok = idem.TokenFromContext(ctx); !ok {
			return nil, errors.New("no token")
		}
		var err error
		rec, err = b.store.Get(ctx, "charges", store.HashKey("charges", "k"))
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok == 0 || tok != rec.Token {
		t.Fatalf("token %d, record's %d", tok, rec.Token)
	}
}

func TestRetryAfterFromLease(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: time.Minute})
	started, finish := make(chan struct{}), make(chan struct{})
	go b.eng.Do(bg, call("k"), func(context.Context) ([]byte, error) {
		close(started)
		<-finish
		return nil, nil
	})
	<-started
	defer close(finish)
	_, err := b.eng.Do(bg, call("k"), (&counter{}).fn)
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Type != idem.ConflictInProgress {
		t.Fatalf("%v", err)
	}
	if ce.Record.ReadAt.IsZero() || ce.Record.LeaseLeft <= 0 || ce.Record.LeaseLeft > time.Minute {
		t.Fatalf("the conflict's record as the store read it: read at %v, lease left %v", ce.Record.ReadAt, ce.Record.LeaseLeft)
	}
	if got := ce.RetryAfter(); got != time.Second {
		t.Errorf("RetryAfter of a holder that just started: %v, want 1s", got)
	}
	// Read later by the store, whose clock the record's times are on: the
	// holder has run `at`, with a minute's lease renewed at its start.
	for _, tc := range []struct {
		at   time.Duration
		want time.Duration
	}{
		{0, time.Second}, // just started: soon
		{2*time.Second + 500*time.Millisecond, 3 * time.Second},   // running 2.5 s: as long again
		{30*time.Second + 500*time.Millisecond, 30 * time.Second}, // capped by the 29.5 s of lease left
		{59*time.Second + 200*time.Millisecond, time.Second},
		{2 * time.Minute, time.Second},
	} {
		r := ce.Record
		r.ReadAt = r.CreatedAt.Add(tc.at)
		r.LeaseLeft = time.Minute - tc.at
		later := &idem.ConflictError{Type: idem.ConflictInProgress, Record: r}
		if got := later.RetryAfter(); got != tc.want {
			t.Errorf("RetryAfter %v after the holder started: %v, want %v", tc.at, got, tc.want)
		}
	}
	other := &idem.ConflictError{Type: idem.ConflictOutcomeUnknown, Record: ce.Record}
	if got := other.RetryAfter(); got != 0 {
		t.Errorf("RetryAfter of outcome_unknown: %v, want 0", got)
	}
}

// TestPausedHolderLosesItsLease is issue 8's paused gateway: the holder
// stops past its lease (a GC pause, a frozen VM), a retry on another
// gateway takes the key over and completes it, then the first resumes.
// Its outcome must come back marked as not recorded, and the record must
// keep the second call's outcome.
func TestPausedHolderLosesItsLease(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	st := memory.New(memory.WithClock(clk.Now))
	p := idem.Policy{Lease: time.Minute, CleanupInterval: -1}
	gw1 := idem.New(st, p, idem.WithClock(clk.Now), quiet)
	gw2 := idem.New(st, p, idem.WithClock(clk.Now), quiet)
	paused, resume := make(chan struct{}), make(chan struct{})
	type outcome struct {
		res idem.Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := gw1.Do(bg, call("k"), func(context.Context) ([]byte, error) {
			close(paused)
			<-resume
			return []byte("A"), nil
		})
		first <- outcome{res, err}
	}()
	<-paused
	clk.Add(61 * time.Second) // the lease runs out while the holder is paused
	res, err := gw2.Do(bg, call("k"), func(context.Context) ([]byte, error) { return []byte("B"), nil })
	if err != nil || !res.TookOver || string(res.Value) != "B" {
		t.Fatalf("takeover: %+v %v", res, err)
	}
	close(resume)
	o := <-first
	if !errors.Is(o.err, idem.ErrLeaseLost) || !o.res.NotRecorded || string(o.res.Value) != "A" {
		t.Fatalf("paused holder: %+v %v, want A not recorded with ErrLeaseLost", o.res, o.err)
	}
	for _, eng := range []*idem.Engine{gw1, gw2} {
		res, err := eng.Do(bg, call("k"), (&counter{}).fn)
		if err != nil || !res.Replayed || string(res.Value) != "B" {
			t.Fatalf("retry after the pause: %+v %v, want B replayed", res, err)
		}
	}
}

func TestCompleteFailurePastRetriesIsNotRecorded(t *testing.T) {
	t.Parallel()
	f := &faulty{Store: memory.New()}
	f.completeErr.Store(1 << 20)
	eng := idem.New(f, idem.Policy{CleanupInterval: -1}, quiet)
	defer eng.Close() // stops writing the kept outcome
	idem.SetCompleteTimeout(eng, 50*time.Millisecond)
	res, err := eng.Do(bg, call("k"), (&counter{value: "v"}).fn)
	if !errors.Is(err, idem.ErrStoreUnavailable) || !res.NotRecorded || !res.Kept || string(res.Value) != "v#1" {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestPolicyOnUnknown(t *testing.T) {
	t.Parallel()
	if s := idem.OnUnknownRelease.String(); s != "release" {
		t.Fatalf("OnUnknownRelease.String() = %q", s)
	}
	if p := (idem.Policy{}).Overlay(idem.Policy{OnUnknown: idem.OnUnknownRelease}); p.OnUnknown != idem.OnUnknownRelease {
		t.Fatalf("Overlay: %v", p.OnUnknown)
	}
	if err := (idem.Policy{OnUnknown: 7}).WithDefaults().Validate(); err == nil {
		t.Fatal("Validate accepted OnUnknown 7")
	}
}

// TestTokensGrowAcrossTakeovers: a holder that takes a key over from one
// stalled past its lease gets a larger fencing token than the one it
// replaced, so an upstream can refuse the older holder by order, not just by
// difference.
func TestTokensGrowAcrossTakeovers(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: time.Second})
	finish := make(chan struct{})
	defer close(finish)
	var last uint64
	for i := range 5 {
		started := make(chan uint64, 1)
		go b.eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			tok, _ := idem.TokenFromContext(ctx)
			started <- tok
			<-finish // every holder stalls
			return nil, nil
		})
		var tok uint64
		select {
		case tok = <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("holder %d never ran", i)
		}
		if tok <= last {
			t.Fatalf("holder %d: token %d not above its predecessor's %d", i, tok, last)
		}
		last = tok
		b.clock.Add(2 * time.Second) // past the holder's lease: the next takes over
	}
}
