package postgres

import (
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// TestEngineClockSkew runs storetest.EngineClockSkew on two replicas
// with store clients of their own (two pools), whose clocks disagree
// by up to 10 leases: no live holder's key runs twice, and a dead
// holder's key is taken over a lease after the taker first looked.
func TestEngineClockSkew(t *testing.T) {
	// Not parallel: it runs before the package's parallel tests, so that
	// the holders' renewals are not starved by them.
	holderPool, retrierPool := testPool(t, 8), testPool(t, 8)
	opts := freshSchema(t, holderPool)
	storetest.EngineClockSkew(t, newTestStore(t, holderPool, opts), newTestStore(t, retrierPool, opts), func(t *testing.T) (store.Store, func()) {
		pool := testPool(t, 4)
		s := newTestStore(t, pool, opts)
		// Closed, the store refuses every call with store.ErrClosed, which
		// the engine does not retry: the holder is gone at once.
		return s, func() { _ = s.Close(); pool.Close() }
	})
}
