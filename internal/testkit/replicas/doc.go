// Package replicas runs a store's servers as a highly available operator
// runs them, for the tests of what a failover does to idem's promise: a
// PostgreSQL primary with a streaming replica (StartPG), a Redis primary
// with a replica (StartRedis), each behind a forwarder standing for a
// virtual IP, with a replication link that can be delayed (a replica
// across a network) and drops what is in flight when the primary dies.
// Failover kills the primary with SIGKILL, promotes the replica, moves the
// virtual IP and makes a new replica, so that a test can fail over again.
//
// It is internal and imported only from _test.go files.
package replicas
