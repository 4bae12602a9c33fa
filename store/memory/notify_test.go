package memory_test

import (
	"testing"

	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two engines over one memory store (two gateways in one
// process) wake each other's waiters through the store.
func TestWake(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.RunWake(t, s, s)
}
