package pgtx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/postgres/pgtx"
)

// chargeSteps are three atomic phases: record the order, charge the card
// (another service, told the step's own idempotency key), record the
// charge. charge decides how the card call goes.
func (b *bundle) chargeSteps(runs *[3]atomic.Int32, charge func(ctx context.Context) error) []pgtx.Step {
	effect := func(i int, what string) func(context.Context, pgx.Tx, []byte) ([]byte, error) {
		return func(ctx context.Context, tx pgx.Tx, state []byte) ([]byte, error) {
			runs[i].Add(1)
			if i == 1 {
				if err := charge(ctx); err != nil {
					return nil, err
				}
			}
			h, _ := idem.HoldFrom(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO `+b.rows+` (record_id, what) VALUES ($1, $2)`, h.ID, what); err != nil {
				return nil, err
			}
			return append(state, what...), nil
		}
	}
	return []pgtx.Step{
		{Name: "order", Run: effect(0, "a")},
		{Name: "charge", Run: effect(1, "b")},
		{Name: "receipt", Run: effect(2, "c")},
	}
}

// TestStepsResumeAfterFailure: the card call fails once; the retry resumes
// at the charge step, and the order step's effect is there once.
func TestStepsResumeAfterFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	var runs [3]atomic.Int32
	var calls atomic.Int32
	steps := b.chargeSteps(&runs, func(context.Context) error {
		if calls.Add(1) == 1 {
			return errors.New("card network timeout")
		}
		return nil
	})
	if _, err := b.store.DoSteps(bg, b.eng, call("k"), steps...); err == nil {
		t.Fatal("first try succeeded")
	}
	if got := b.effects(t, "k"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("after the failure: %v, want [a]", got)
	}
	res, err := b.store.DoSteps(bg, b.eng, call("k"), steps...)
	if err != nil || string(res.Value) != "abc" {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := b.effects(t, "k"); len(got) != 3 || runs[0].Load() != 1 || runs[1].Load() != 2 || runs[2].Load() != 1 {
		t.Fatalf("effects %v, step runs %d %d %d", got, runs[0].Load(), runs[1].Load(), runs[2].Load())
	}
	var n int
	if err := b.pool.QueryRow(bg, `SELECT count(*) FROM `+pgx.Identifier{b.opts.Schema, "idem_records" + pgtx.StepsTable}.Sanitize()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d recovery points left (%v)", n, err)
	}
	res, err = b.store.DoSteps(bg, b.eng, call("k"), steps...)
	if err != nil || !res.Replayed || runs[0].Load() != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
}

// TestStepsResumeAfterTakeover: the holder stalls in the card call past its
// lease; the caller that takes the key over resumes after the order step,
// and the stalled holder cannot commit the charge step.
func TestStepsResumeAfterTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{Lease: 500 * time.Millisecond})
	var runs [3]atomic.Int32
	inCall := make(chan struct{})
	resume := make(chan struct{})
	var calls atomic.Int32
	steps := b.chargeSteps(&runs, func(context.Context) error {
		if calls.Add(1) == 1 {
			close(inCall)
			<-resume
		}
		return nil
	})
	stale := make(chan error, 1)
	go func() {
		_, err := b.store.DoSteps(bg, b.eng, call("k"), steps...)
		stale <- err
	}()
	<-inCall
	pgtx.Stall(b.store, true) // the holder's renewals stop: its lease runs out
	var res idem.Result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		res, err = b.store.DoSteps(bg, b.eng, call("k"), steps...)
		if err == nil {
			break
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("takeover: %+v, %v", res, err)
		}
	}
	pgtx.Stall(b.store, false)
	if !res.TookOver || string(res.Value) != "abc" {
		t.Fatalf("takeover: %+v", res)
	}
	close(resume)
	if err := <-stale; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stalled holder: %v, want ErrLeaseLost", err)
	}
	if got := b.effects(t, "k"); len(got) != 3 || runs[0].Load() != 1 {
		t.Fatalf("effects %v, order step ran %d times", got, runs[0].Load())
	}
}
