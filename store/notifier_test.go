package store_test

import (
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// wrapper hides its store's methods beyond store.Store, as a store that
// encrypts records would.
type wrapper struct{ inner store.Store }

func (w wrapper) Unwrap() store.Store { return w.inner }

type wrapped struct {
	store.Store
	wrapper
}

func TestNotifierOf(t *testing.T) {
	m := memory.New()
	if n, ok := store.NotifierOf(m); !ok || n != store.Notifier(m) {
		t.Fatal("the memory store's Notifier not found")
	}
	w := wrapped{Store: m, wrapper: wrapper{m}}
	if _, ok := store.Store(w).(store.Notifier); ok {
		t.Fatal("the wrapper should hide Notifier for this test")
	}
	if n, ok := store.NotifierOf(wrapped{Store: w, wrapper: wrapper{w}}); !ok || n != store.Notifier(m) {
		t.Fatal("Notifier not found through two wrappers")
	}
	if _, ok := store.NotifierOf(struct{ store.Store }{m}); ok {
		t.Fatal("found a Notifier in a store that neither has nor unwraps one")
	}
}
