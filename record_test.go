package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// TestEngineUses: an adapter can check that an engine runs over its own
// store, directly or wrapped, without the engine handing the store out.
func TestEngineUses(t *testing.T) {
	t.Parallel()
	s := memory.New()
	eng := idem.New(s, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	if !eng.Uses(s) {
		t.Fatal("Uses(its own store) = false")
	}
	if eng.Uses(memory.New()) || eng.Uses(nil) {
		t.Fatal("Uses(another store) = true")
	}
	wrapped := idem.New(wrapper{s}, idem.Policy{CleanupInterval: -1})
	defer wrapped.Close()
	if !wrapped.Uses(s) {
		t.Fatal("Uses(the store it wraps) = false")
	}
}

type wrapper struct{ store.Store }

func (w wrapper) Unwrap() store.Store { return w.Store }

func TestRecordHidesTheMarker(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	ctx := context.Background()
	_, _ = eng.Do(ctx, idem.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("reset: %w", idem.ErrOutcomeUnknown)
	})
	rec, err := eng.Lookup(ctx, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.OutcomeUnknown || rec.Value[0] == 0 || rec.State != store.Failed || !rec.Releasable() || rec.Stale() {
		t.Fatalf("record %+v", rec)
	}
	_, err = eng.Do(ctx, idem.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return nil, nil })
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || !ce.Record.OutcomeUnknown || string(ce.Record.Value) != string(rec.Value) {
		t.Fatalf("conflict %v: %+v", err, ce)
	}
}
