package testkit

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the package's tests, then fails the run if any test
// left a goroutine behind: a store's watchdog, a lease renewal or a waiter
// that outlives its call is a held resource, which idem promises never to
// leave. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}
