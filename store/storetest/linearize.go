package storetest

import (
	"testing"

	"github.com/idem-dev/idem/store/storetest/history"
)

// testLinearizable: a history of random operations from the store and its
// peer, on a few keys with short leases, is linearizable (see package
// history).
func testLinearizable(t *testing.T, h Harness) {
	s := newStore(t, h)
	history.Check(t, history.Config{NoStaleReleases: h.UnconditionalDeletes}, s, peerOf(t, h, s))
}
