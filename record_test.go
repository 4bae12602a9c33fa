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

func TestEngineAs(t *testing.T) {
	t.Parallel()
	s := memory.New()
	eng := idem.New(s, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	var got *memory.Store
	if !eng.As(&got) || got != s {
		t.Fatalf("As(*memory.Store) = %v, %p; want the engine's store %p", got != nil, got, s)
	}
	var other *otherStore
	if eng.As(&other) || other != nil {
		t.Fatal("As set a store of another type")
	}
	if eng.As(nil) || eng.As(got) {
		t.Fatal("As accepted a target that is not a non-nil pointer to a store type")
	}
	var any store.Store
	if !eng.As(&any) || any != store.Store(s) {
		t.Fatal("As(*store.Store) did not hand over the store")
	}
}

type otherStore struct{ store.Store }

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
