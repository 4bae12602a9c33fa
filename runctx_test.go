package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// TestOperationContext: the context an operation runs with behaves as a
// context.WithCancelCause of the caller's, whether or not the operation
// ever selects on its Done.
func TestOperationContext(t *testing.T) {
	t.Parallel()
	closed := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}
	type valueKey struct{}

	t.Run("lost lease, Done never called", func(t *testing.T) {
		t.Parallel()
		f := &faulty{Store: memory.New(), renewErr: store.ErrLeaseLost}
		eng := idem.New(f, idem.Policy{CleanupInterval: -1, Lease: 30 * time.Millisecond, TTL: time.Hour}, quiet)
		var kept context.Context
		_, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			kept = ctx
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
			}
			return nil, errors.New("never canceled")
		})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the operation saw %v, want ErrLeaseLost", err)
		}
		if !closed(kept) || !errors.Is(kept.Err(), context.Canceled) || !errors.Is(context.Cause(kept), idem.ErrLeaseLost) {
			t.Fatalf("after the run: closed %v, err %v, cause %v", closed(kept), kept.Err(), context.Cause(kept))
		}
	})

	t.Run("ended run, Done never called", func(t *testing.T) {
		t.Parallel()
		eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, quiet)
		parent, cancel := context.WithCancelCause(context.WithValue(bg, valueKey{}, "v"))
		defer cancel(nil)
		var kept context.Context
		var during error
		if _, err := eng.Do(parent, call("k"), func(ctx context.Context) ([]byte, error) {
			kept, during = ctx, ctx.Err()
			if ctx.Value(valueKey{}) != "v" {
				t.Errorf("the caller's value is lost: %v", ctx.Value(valueKey{}))
			}
			if tok, ok := idem.TokenFromContext(ctx); !ok || tok == 0 {
				t.Errorf("TokenFromContext = %d, %v", tok, ok)
			}
			if h, ok := idem.HoldFrom(ctx); !ok || h.Key != "k" {
				t.Errorf("HoldFrom = %+v, %v", h, ok)
			}
			return []byte("ok"), nil
		}); err != nil {
			t.Fatal(err)
		}
		if during != nil {
			t.Fatalf("canceled while running: %v", during)
		}
		check := func(when string) {
			t.Helper()
			if kept.Err() != context.Canceled || context.Cause(kept) != context.Canceled || kept.Value(valueKey{}) != "v" {
				t.Fatalf("%s: err %v, cause %v, value %v", when, kept.Err(), context.Cause(kept), kept.Value(valueKey{}))
			}
		}
		check("after the run")
		// The caller's context ending later changes nothing.
		cancel(errors.New("client gone"))
		check("after the caller's end")
		if !closed(kept) {
			t.Fatal("Done is not closed after the run")
		}
		check("after Done")
	})

	t.Run("caller's context ends first", func(t *testing.T) {
		t.Parallel()
		eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, quiet)
		parent, cancel := context.WithCancelCause(bg)
		gone := errors.New("client gone")
		var kept context.Context
		if _, err := eng.Do(parent, call("k"), func(ctx context.Context) ([]byte, error) {
			kept = ctx
			cancel(gone)
			if ctx.Err() != context.Canceled || context.Cause(ctx) != gone {
				t.Errorf("while running: err %v, cause %v", ctx.Err(), context.Cause(ctx))
			}
			return []byte("ok"), nil
		}); err != nil {
			t.Fatal(err)
		}
		if kept.Err() != context.Canceled || context.Cause(kept) != gone || !closed(kept) || context.Cause(kept) != gone {
			t.Fatalf("after the run: err %v, cause %v", kept.Err(), context.Cause(kept))
		}
	})

	t.Run("a context made from it ends with the run", func(t *testing.T) {
		t.Parallel()
		eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, quiet)
		var child context.Context
		var stopChild context.CancelFunc
		var stopAfter func() bool
		if _, err := eng.Do(bg, call("k"), func(ctx context.Context) ([]byte, error) {
			child, stopChild = context.WithTimeout(ctx, time.Hour)
			stopAfter = context.AfterFunc(ctx, func() {})
			return []byte("ok"), nil
		}); err != nil {
			t.Fatal(err)
		}
		defer stopChild()
		if !closed(child) || child.Err() != context.Canceled {
			t.Fatalf("a child of the operation's context after the run: %v", child.Err())
		}
		if stopAfter() {
			t.Fatal("context.AfterFunc of the operation's context did not run at the end")
		}
	})
}

// TestOperationContextAfterFunc: context.AfterFunc of the operation's
// context (the gateway counts a call in flight until its run ends by it)
// calls its function when the run loses its lease or ends, not once
// stopped, and at once when registered after the end.
func TestOperationContextAfterFunc(t *testing.T) {
	t.Parallel()
	cancelable, cancel := context.WithCancel(bg)
	t.Cleanup(cancel)
	for _, parent := range []struct {
		name string
		ctx  context.Context
	}{{"caller's context never ends", bg}, {"caller's context can end", cancelable}} {
		t.Run(parent.name, func(t *testing.T) {
			t.Parallel()
			f := &faulty{Store: memory.New(), renewErr: store.ErrLeaseLost}
			eng := idem.New(f, idem.Policy{CleanupInterval: -1, Lease: 30 * time.Millisecond, TTL: time.Hour}, quiet)
			lost, stopped := make(chan error, 1), make(chan struct{}, 1)
			var kept context.Context
			_, err := eng.Do(parent.ctx, call("k"), func(ctx context.Context) ([]byte, error) {
				kept = ctx
				if !context.AfterFunc(ctx, func() { stopped <- struct{}{} })() {
					return nil, errors.New("stop before the end: false")
				}
				context.AfterFunc(ctx, func() { lost <- context.Cause(ctx) })
				select {
				case cause := <-lost:
					return nil, cause
				case <-time.After(10 * time.Second):
					return nil, errors.New("never called")
				}
			})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("the function saw %v, want ErrLeaseLost", err)
			}
			late := make(chan struct{})
			if context.AfterFunc(kept, func() { close(late) })() {
				t.Error("stop after the end: true")
			}
			select {
			case <-late:
			case <-time.After(10 * time.Second):
				t.Fatal("a function registered after the end was never called")
			}
			if len(stopped) != 0 {
				t.Fatal("a stopped function was called")
			}
		})
	}
}
