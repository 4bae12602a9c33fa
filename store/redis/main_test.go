package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves goroutines behind, the store's
// watchdogs included.
func TestMain(m *testing.M) {
	race.Child() // a re-executed test binary is a racer of TestMultiProcessRace
	goleak.VerifyTestMain(m)
}
