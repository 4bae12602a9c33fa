package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves goroutines behind, the store's
// watchdogs included.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
