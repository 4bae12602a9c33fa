// Package redisstore keeps idem's idempotency records in Redis (DSN
// redis://...), standalone or Redis Cluster.
//
// The package lives at store/redis but is named redisstore, so that it can
// be imported next to go-redis (package redis) without renaming either:
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	defer client.Close()
//	st, err := redisstore.New(client, redisstore.Options{Prefix: "billing:idem:"})
//
// New takes a go-redis client, which Go services often have already;
// NewRueidis takes a rueidis client, which pipelines concurrent callers
// over one connection per node, costs less CPU a call, and is what the
// gateway uses. Both run the same scripts and pass the same conformance
// suite.
//
// # The guarantee
//
// Each record is one hash, named Prefix + "{" + key hash + "}": the raw key
// is a field, never part of a name, and the hash tag keeps every record in
// one cluster slot. Every transition (Reserve, Renew, Complete, Release) is
// one Lua script, which Redis runs without interleaving any other command,
// so of any number of processes racing Reserve on one key exactly one
// creates the record; Renew, Complete and Release check the holder's token
// and the in_progress state in the same script, and return
// store.ErrLeaseLost when either differs. Every call, Get included, runs on
// the primary that holds the key.
//
// Leases and expiry are judged on Redis's clock, never the callers'
// (store/doc.go, "One clock for a lease"): each script reads TIME on the
// node that holds its key, and gives the key its lifetime with PEXPIRE.
// Redis then expires records itself, so Cleanup has nothing to do. Waiters
// of an engine whose policy waits are woken by PUBLISH on Prefix +
// "notify", and poll as a safety net.
//
// # Contexts and failures
//
// Give a go-redis client ContextTimeoutEnabled: true, so that it bounds its
// socket reads by the context's deadline (rueidis does so itself). The
// store returns by the deadline in any case; as with any remote store, a
// call stopped by its deadline may still have taken effect.
//
// Without persistence a restarted Redis has forgotten every record: run
// Redis with AOF (appendfsync everysec or always) where keys must survive a
// restart. Replication is asynchronous: a failover can lose the last
// reservations made on the old primary, and a key may then run twice.
//
// The design in full (the layout and scripts, Redis's clock and the
// upgrade from hashes that hold their writers' clocks, waking waiters,
// contexts in detail) is in docs/stores/REDIS.md.
package redisstore
