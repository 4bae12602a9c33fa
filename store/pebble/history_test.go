package pebblestore

import (
	"testing"

	"github.com/idem-dev/idem/store/storetest/history"
)

// TestHistoryCrash: the store's histories stay linearizable across kill -9
// and restart; calls cut by the kill took effect entirely or not at all,
// and a call that returned is there after the restart.
func TestHistoryCrash(t *testing.T) {
	t.Parallel()
	history.RunCrash(t, openCrash)
}
