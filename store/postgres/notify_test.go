package postgres

import (
	"testing"

	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two stores over one table through two pools, as two gateways
// would be: a waiter on one is woken by LISTEN/NOTIFY when the holder on
// the other ends, and the figure of that wake-up is logged (go test -v).
func TestWake(t *testing.T) {
	pool, peerPool := testPool(t, 8), testPool(t, 8)
	opts := freshSchema(t, pool)
	a, b := newTestStore(t, pool, opts), newTestStore(t, peerPool, opts)
	storetest.RunWake(t, a, b)
}
