// Package testkit is the test machinery that idem's packages share, so that
// each is written once: a settable clock for leases and TTLs, the goroutine
// leak check every package's TestMain runs, and a fan-out that releases many
// racers at the same instant.
//
// It is internal and imported only from _test.go files.
package testkit
