package pebblestore

import (
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

func openCrash(dir string) (store.Store, error) { return Open(dir, quiet) }

// TestCrash kills a child writing through the Pebble store with SIGKILL 24 times
// and checks every key it reported after each reopen.
func TestCrash(t *testing.T) {
	t.Parallel()
	storetest.RunCrash(t, storetest.CrashHarness{
		Open:    openCrash,
		Records: func(t *testing.T, s store.Store) map[string]*store.Record { return checkIndex(t, s.(*Store)) },
	})
}
