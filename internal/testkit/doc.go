// Package testkit is the test machinery that idem's packages share, so that
// each is written once: a settable clock for leases and TTLs, the goroutine
// leak check every package's TestMain runs, a fan-out that releases many
// racers at the same instant, and its HTTP form (SameKey): n copies of one
// request with one idempotency key.
//
// The other test rigs live beside it, one job each: testenv finds or starts
// the servers the tests run against (PostgreSQL, Redis, S3, DynamoDB,
// brokers, Temporal), tmpdisk mounts small filesystems to fill,
// killtest kills a consumer between its effect and its record, and
// replicas runs a PostgreSQL or Redis primary with a replica behind a
// virtual IP and fails it over.
//
// It is internal and imported only from _test.go files.
package testkit
