package consume

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestDecide(t *testing.T) {
	boom := errors.New("downstream down")
	for _, c := range []struct {
		name string
		err  error
		want Action
	}{
		{"success", nil, Ack},
		{"recorded before", &trigger.AlreadyStartedError{ID: "e"}, Ack},
		{"bare ErrAlreadyStarted (pgtx.RunLog.Once)", trigger.ErrAlreadyStarted, Ack},
		{"wrapped ErrAlreadyStarted", fmt.Errorf("ingest: %w", trigger.ErrAlreadyStarted), Ack},
		{"joined ErrAlreadyStarted", errors.Join(boom, trigger.ErrAlreadyStarted), Ack},
		{"held by another", &trigger.AlreadyStartedError{ID: "e", Running: true, LeaseLeft: time.Hour}, Wait},
		{"wrapped held by another", fmt.Errorf("x: %w", &trigger.AlreadyStartedError{ID: "e", Running: true, LeaseLeft: time.Hour}), Wait},
		{"failure", boom, Retry},
		{"lease lost", idem.ErrLeaseLost, Retry},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.err)
			if v.Action != c.want || v.Err != c.err {
				t.Fatalf("Decide(%v) = %+v, want %v", c.err, v, c.want)
			}
			if v.Action == Wait && (v.Delay < 59*time.Minute || v.Delay > time.Hour+time.Second) {
				t.Fatalf("delay %v, want the holder's lease (1 h) and a little", v.Delay)
			}
		})
	}
}

func TestHolderDelay(t *testing.T) {
	if d := HolderDelay(&trigger.AlreadyStartedError{Running: true}); d != minHolderDelay {
		t.Errorf("unknown lease: %v, want %v", d, minHolderDelay)
	}
	if d := HolderDelay(&trigger.AlreadyStartedError{Running: true, LeaseLeft: -time.Minute}); d != minHolderDelay {
		t.Errorf("lease over: %v, want %v", d, minHolderDelay)
	}
	if d := HolderDelay(&trigger.AlreadyStartedError{Running: true, LeaseLeft: 10 * time.Second, LeaseUntil: time.Now().Add(-time.Hour)}); d <= 10*time.Second-time.Second || d > 10*time.Second+holderSlack {
		t.Errorf("lease in 10 s: %v", d)
	}
}

func starter(t *testing.T) *trigger.Starter {
	eng := idem.New(memory.New(), idem.Policy{})
	t.Cleanup(func() { eng.Close() })
	return &trigger.Starter{Engine: eng, Scope: "events"}
}

// A handler that finds its event handled (trigger.ErrAlreadyStarted, as
// pgtx.RunLog.Once returns) is acked and recorded as a success: the next
// delivery is acked without running.
func TestRunHandledBefore(t *testing.T) {
	s := starter(t)
	ctx := context.Background()
	runs := 0
	handler := func(context.Context) error {
		runs++
		return trigger.ErrAlreadyStarted
	}
	v := Run(ctx, s, "ingest", "evt_1", handler)
	if v.Action != Ack || !errors.Is(v.Err, trigger.ErrAlreadyStarted) {
		t.Fatalf("first delivery: %+v", v)
	}
	v = Run(ctx, s, "ingest", "evt_1", handler)
	if v.Action != Ack || runs != 1 {
		t.Fatalf("second delivery: %+v after %d runs; want an ack without running", v, runs)
	}
	rec, err := s.Engine.Lookup(ctx, "events", trigger.EventKey("ingest", "evt_1"))
	if err != nil || rec.State != idem.Succeeded {
		t.Fatalf("record %+v, %v; want succeeded", rec, err)
	}
}

// A handler failure is retried, and leaves nothing recorded: the next
// delivery runs it again.
func TestRunFailure(t *testing.T) {
	s := starter(t)
	ctx := context.Background()
	boom := errors.New("downstream down")
	if v := Run(ctx, s, "ingest", "evt_1", func(context.Context) error { return boom }); v.Action != Retry || !errors.Is(v.Err, boom) {
		t.Fatalf("failure: %+v", v)
	}
	if v := Run(ctx, s, "ingest", "evt_1", func(context.Context) error { return nil }); v.Action != Ack || v.Err != nil {
		t.Fatalf("retry: %+v", v)
	}
}

// A handler that reports another start of its own still running waits for
// it, as a start that finds its event running does.
func TestRunNestedRunning(t *testing.T) {
	s := starter(t)
	held := &trigger.AlreadyStartedError{ID: "other", Running: true, LeaseLeft: time.Second}
	v := Run(context.Background(), s, "ingest", "evt_1", func(context.Context) error { return held })
	if v.Action != Wait || v.Delay < 500*time.Millisecond {
		t.Fatalf("%+v", v)
	}
}

type key struct{}

// Handlers begun before the stop keep their context past it, until the
// bound; nothing begins after it; Wait waits for the running ones.
func TestDrain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	d := NewDrain(ctx, 300*time.Millisecond)
	hctx, ok := d.Begin()
	if !ok || hctx.Value(key{}) != "v" {
		t.Fatalf("Begin: %v, value %v", ok, hctx.Value(key{}))
	}
	stop := time.Now()
	cancel()
	if _, ok := d.Begin(); ok {
		t.Fatal("a handler began after the stop")
	}
	if hctx.Err() != nil {
		t.Fatalf("the handler's context ended with the consumer's: %v", hctx.Err())
	}
	<-hctx.Done()
	if e := time.Since(stop); e < 300*time.Millisecond {
		t.Fatalf("the handler's context ended %v after the stop, before the bound", e)
	}
	if !errors.Is(context.Cause(hctx), ErrDrainTimeout) {
		t.Fatalf("cause %v", context.Cause(hctx))
	}
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("Wait returned while a handler runs")
	case <-time.After(50 * time.Millisecond):
	}
	d.End()
	<-done
}

// A handler that ends before the bound releases the drain at once; a
// negative bound ends the handlers' context with the consumer's.
func TestDrainEarlyAndNone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := NewDrain(ctx, time.Hour)
	hctx, _ := d.Begin()
	cancel()
	d.End()
	d.Wait() // does not wait for the hour
	if hctx.Err() == nil {
		t.Fatal("the handlers' context outlived Wait")
	}

	ctx, cancel = context.WithCancel(context.Background())
	d = NewDrain(ctx, -1)
	hctx, _ = d.Begin()
	cancel()
	<-hctx.Done()
	d.End()
	d.Wait()

	// A consumer that stops for another reason (its channel closed) before
	// its context ends.
	d = NewDrain(context.Background(), time.Hour)
	d.Wait()
}
