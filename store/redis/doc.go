// Package redisstore keeps idem's idempotency records in Redis (DSN
// redis://...), standalone or Redis Cluster.
//
// The package lives at store/redis but is named redisstore, so that it can
// be imported next to go-redis (package redis) without renaming either:
//
//	import (
//		"github.com/redis/go-redis/v9"
//		redisstore "github.com/idem-dev/idem/store/redis"
//	)
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	defer client.Close()
//	st, err := redisstore.New(client, redisstore.Options{Prefix: "billing:idem:"})
//
// # Two clients: go-redis and rueidis
//
// New takes a go-redis client, which Go services often have already;
// NewRueidis takes a rueidis client, which the gateway uses. Both run the
// same scripts and pass the same conformance suite, racing each other on
// the same keys. rueidis pipelines the commands of concurrent callers over
// one connection per node, where go-redis writes and reads each command on
// a pooled connection of its own; side by side (BenchmarkClients), rueidis
// takes less CPU a pair and makes more pairs a second at every concurrency
// measured (docs/bench/STORE-DESIGN.md).
//
// rueidis honours every context deadline itself, so a store on it never
// needs the watchdog goroutine described below.
//
// # Layout
//
// Each record is one Redis hash named Prefix + "{" + key hash + "}", where
// the key hash is store.HashKey(scope, key): the client's raw key is a field
// of the hash, never part of a key name. The braces are a hash tag, so on a
// cluster every record lives in one slot picked by its key hash, and every
// transition, which touches that one key only, can run there.
//
// # Atomicity
//
// Every transition (Reserve, Renew, Complete, Release) is one Lua script,
// sent with EVALSHA and, when the server does not know it yet (a restart, a
// new cluster node), with EVAL. Redis runs a script without interleaving any
// other command, so of any number of processes racing Reserve on one key,
// exactly one creates the record. Renew, Complete and Release check the
// holder's token and the in_progress state in the same script, and return
// store.ErrLeaseLost when either differs. Tokens are kept as decimal strings,
// since Lua numbers are doubles and cannot hold every uint64.
//
// # One clock: Redis's
//
// Leases and expiry are judged on Redis's clock, never the callers'
// (store/doc.go, "One clock for a lease"). Callers send the lease and the
// lifetime as durations; each script reads the time with TIME on the node
// that holds its key, sets the times it writes from it, and gives the key
// its lifetime with PEXPIRE, a duration (rounded up to a millisecond).
// Redis then expires records itself: a record exists exactly as long as its
// key, Cleanup has nothing to do and returns 0. A lease is over once its
// lease-until has passed on TIME. Get and Reserve return a record with
// Redis's time and the key's PTTL, read by the same script: Record.ReadAt
// and LeaseLeft are on Redis's clock, and no call costs a round trip more
// than before (Get is a script where it was an HMGET). Times are kept at
// microsecond precision, as PostgreSQL keeps them.
//
// Hashes written before this version hold their writers' clocks, and lack
// the sv field that marks this version's. The store reads their lifetime
// from the key's PTTL, which that version set as a duration too, and judges
// their lease by watching them (store/internal/leasewatch): over once this
// process has seen the same token and lease-until, unchanged, for a whole
// lease of its own policy. A holder of the earlier version that still
// renews, whatever its clock, is never taken over; a dead one is taken
// over a lease after it was first seen. Replicas of the earlier version
// still judge by their own clocks until they are replaced.
//
// Every call, Get included, is a script run on the primary that holds the
// key, so a Get never reads a replica that has not seen the latest
// Complete.
//
// # Waking waiters
//
// The store implements store.Notifier: an engine whose policy waits
// (idem.Policy.Wait) PUBLISHes the key hash on Prefix + "notify" when it
// ends a call, and each Store keeps one subscribed connection (go-redis
// gives a PubSub its own), started by the first waiter and resubscribed
// when it breaks. Redis keeps no message for a subscriber that is away, so
// waiters are all woken after a reconnection, and poll as a safety net.
//
// # Contexts and failures
//
// Give the client ContextTimeoutEnabled: true, so that go-redis bounds its
// socket reads by the context's deadline. The store returns by the deadline
// in any case (with a client that ignores deadlines it runs such a call in
// a goroutine of its own, which is slower, and leaves it to end at the
// client's read timeout), with an error that errors.Is matches against
// context.DeadlineExceeded or context.Canceled. A cancellation without a
// deadline stops a call that has not started; one in flight runs to its end,
// which the client's read timeout bounds, and reports its own outcome. As
// with any remote store, a call stopped by its deadline may still have taken
// effect: a Reserve that did leaves an in_progress record that its lease
// releases.
//
// While Redis is unreachable every call returns an error; the same Store
// works again once the client reconnects. Without persistence a restarted
// Redis has forgotten every record; run Redis with AOF (appendfsync everysec
// or always) where keys must survive a restart. Replication is
// asynchronous: a failover can lose the last reservations made on the old
// primary, and a key may then run twice.
package redisstore
