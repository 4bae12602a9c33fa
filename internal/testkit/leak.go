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

// VerifyTestMainAfter is VerifyTestMain for a package whose tests share
// servers started once (an S3 server, a client's connection pool): stop
// runs after the tests and before the check, so that only what a test
// left behind counts as a leak.
func VerifyTestMainAfter(m *testing.M, stop func(), opts ...goleak.Option) {
	goleak.VerifyTestMain(runThen{m: m, stop: stop}, opts...)
}

// runThen is a goleak.TestingM whose Run stops the shared servers once
// the tests are over.
type runThen struct {
	m    *testing.M
	stop func()
}

func (r runThen) Run() int {
	code := r.m.Run()
	r.stop()
	return code
}
