package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit"
)

// TestMain fails the run when a test leaves goroutines behind, the store's
// watchdogs included. go-redis's logger is process-wide, so it is set here,
// once, before any test runs: the tests that stop servers on purpose then
// run in parallel with the others.
func TestMain(m *testing.M) {
	race.Child() // a re-executed test binary is a racer of TestMultiProcessRace
	redis.SetLogger(quietLogger{})
	testkit.VerifyTestMain(m)
}
