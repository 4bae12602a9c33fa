// Package testkit is the test machinery that idem's packages share, so that
// each is written once: a settable clock for leases and TTLs, the goroutine
// leak check every package's TestMain runs, a fan-out that releases many
// racers at the same instant, and its HTTP form (SameKey): n copies of one
// request with one idempotency key.
//
// It is internal and imported only from _test.go files.
package testkit
