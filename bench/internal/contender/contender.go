// Package contender lists what the harness measures side by side: the
// baselines, idem's gateway and middleware on each store, and the peers a
// user would pick instead. Each is its own process.
package contender

import (
	"fmt"
	"net"
	"path/filepath"

	"github.com/idem-dev/idem/bench/internal/results"
)

// Kinds of contender.
const (
	Baseline  = "baseline"
	Proxy     = "proxy"      // fronts the upstream over HTTP
	InProcess = "in-process" // runs the operation itself
)

// Setup is where the harness keeps its binaries and services.
type Setup struct {
	Bin      string // directory of the bench binaries and idem
	Peers    string // directory of the Node peers
	Upstream string // address of the upstream, host:port
	Listen   string // address of the contender, host:port
	Admin    string // address of the gateway's admin listener
	Postgres string // PostgreSQL DSN (idem's form, with idem_schema)
	Redis    string // Redis URL without a database number
	// RedisFsync is a second Redis, with appendonly yes and appendfsync
	// always (durable as the file store and PostgreSQL are), URL without
	// a database number; "" when none was started.
	RedisFsync string
}

// Contender is one thing measured.
type Contender struct {
	results.Contender
	// KeyHeader is the header the contender reads its key from.
	KeyHeader string
	// NeedsUpstream: the contender proxies to the upstream, which then
	// counts the executions.
	NeedsUpstream bool
	// Argv returns the command line; dir is a fresh directory for the
	// contender's files.
	Argv func(s Setup, dir string) []string
	// Env is added to the harness's environment.
	Env func(s Setup) []string
	// RedisDB, when not 0, is the Redis database the contender uses,
	// flushed before each round; on Setup.RedisFsync when RedisFsync.
	RedisDB    int
	RedisFsync bool
	// Postgres: the contender's table is emptied before each round.
	Postgres bool
}

// UpstreamArgv is the upstream's command line.
func UpstreamArgv(s Setup) []string {
	return []string{filepath.Join(s.Bin, "upstream"), "-listen", s.Upstream}
}

func gateway(id, store, notes string, storeDSN func(s Setup, dir string) string) Contender {
	return Contender{
		Contender: results.Contender{
			ID: id, Name: "idem gateway (" + store + ")", Kind: Proxy, Store: store, Baseline: "proxy", Notes: notes,
		},
		KeyHeader:     "Idempotency-Key",
		NeedsUpstream: true,
		Argv: func(s Setup, dir string) []string {
			return []string{filepath.Join(s.Bin, "idem"), "serve",
				"--listen", s.Listen, "--upstream", "http://" + s.Upstream,
				"--store", storeDSN(s, dir), "--admin-listen", s.Admin}
		},
	}
}

func redisURL(base string, db int) string { return fmt.Sprintf("%s/%d", base, db) }

// All returns every contender, in the order each round runs them.
func All() []Contender {
	node := func(id, name, script, notes string, db int) Contender {
		return Contender{
			Contender: results.Contender{ID: id, Name: name, Kind: InProcess, Store: "redis", Baseline: "upstream", Notes: notes},
			KeyHeader: "Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{"node", filepath.Join(s.Peers, script)}
			},
			Env: func(s Setup) []string {
				_, port, _ := net.SplitHostPort(s.Listen)
				return []string{"PORT=" + port, "REDIS_URL=" + redisURL(s.Redis, db), "NODE_ENV=production"}
			},
			RedisDB: db,
		}
	}
	gwRedis := gateway("gw-redis", "redis", "", func(s Setup, _ string) string { return redisURL(s.Redis, 9) })
	gwRedis.RedisDB = 9
	gwRedisFsync := gateway("gw-redis-fsync", "redis, appendfsync always",
		"Redis with appendonly yes and appendfsync always (a second server started by the harness): every write is on disk before Redis answers, as with the file store and PostgreSQL",
		func(s Setup, _ string) string { return redisURL(s.RedisFsync, 9) })
	gwRedisFsync.RedisDB, gwRedisFsync.RedisFsync = 9, true
	gwRedis.Notes = "Redis as the machine runs it (no appendonly): an answer is in memory only, not durable"
	gwPostgres := gateway("gw-postgres", "postgres", "", func(s Setup, _ string) string { return s.Postgres })
	gwPostgres.Postgres = true
	mwRedis := middleware("mw-redis", "redis", func(s Setup, _ string) string { return redisURL(s.Redis, 8) })
	mwRedis.RedisDB = 8
	return []Contender{
		{
			Contender: results.Contender{ID: "upstream", Name: "upstream directly", Kind: Baseline, Store: "-",
				Notes: "the trivial Go net/http API itself, no idempotency: the floor for in-process contenders"},
			KeyHeader: "Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "upstream"), "-listen", s.Listen}
			},
		},
		{
			Contender: results.Contender{ID: "proxy", Name: "httputil.ReverseProxy", Kind: Baseline, Store: "-",
				Notes: "a plain Go reverse proxy (256 idle connections per host): the floor for a gateway"},
			KeyHeader:     "Idempotency-Key",
			NeedsUpstream: true,
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "plainproxy"), "-listen", s.Listen, "-upstream", "http://" + s.Upstream}
			},
		},
		durableProxy(2, "durable-proxy", "two synced Pebble WAL appends a request (LogData with pebble.Sync), one before forwarding and one after the answer: the least a gateway does that persists its reservation before the upstream runs (on_stale: conflict); for comparison"),
		durableProxy(1, "durable-proxy-1", "one synced Pebble WAL append a request (LogData with pebble.Sync) of the request's and the answer's bytes, after the answer: the floor of a first call that syncs once (the file and Pebble stores with OneSync, the gateway's setting), the anchor of the durable stores' first calls"),
		gateway("gw-memory", "memory", "", func(Setup, string) string { return "memory:" }),
		gateway("gw-file", "file", "the embedded store, idem's default", func(_ Setup, dir string) string { return "file:" + filepath.Join(dir, "idem-data") }),
		gateway("gw-pebble", "pebble", "the embedded store on Pebble", func(_ Setup, dir string) string { return "pebble:" + filepath.Join(dir, "idem-data") }),
		gwPostgres,
		gwRedis,
		gwRedisFsync,
		middleware("mw-memory", "memory", func(Setup, string) string { return "memory:" }),
		{
			Contender: results.Contender{ID: "mw-lean", Name: "idem middleware (memory, lean)", Kind: InProcess, Store: "memory", Baseline: "upstream",
				Notes: "idemhttp as gofiber's middleware is: no request fingerprint, no tenants (TenantNone), no body read deadline; still the lease, the fencing token, the request ID and the handler's own copy of the request. For comparison only: the goals are decided on the defaults (mw-memory)"},
			KeyHeader: "Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "idemmw"), "-listen", s.Listen, "-store", "memory:", "-lean"}
			},
		},
		mwRedis,
		{
			Contender: results.Contender{ID: "ref-mw", Name: "reference middleware (net/http)", Kind: InProcess, Store: "memory (sync.Map)", Baseline: "upstream",
				Notes: "the same-stack reference (bench/internal/refmw): SHA-256 of the body, an atomic reservation in a sync.Map, a buffered replay of status, headers and body; 409 for a concurrent duplicate, 422 for another body; no expiry, lease, tenants or durability"},
			KeyHeader: "Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "refmw"), "-listen", s.Listen}
			},
		},
		{
			Contender: results.Contender{ID: "fiber-bare", Name: "fiber (no middleware)", Kind: Baseline, Store: "-",
				Notes: "fiber v2.52.15 serving the same operation without idempotency: gofiber's own floor"},
			KeyHeader: "X-Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "fiberidem"), "-bare", "-listen", s.Listen}
			},
		},
		{
			Contender: results.Contender{ID: "fiber", Name: "gofiber idempotency", Kind: InProcess, Store: "memory", Baseline: "fiber-bare",
				Notes: "fiber v2.52.15, middleware/idempotency with its in-memory storage and lock (per process); header X-Idempotency-Key; no request fingerprint; keeps any status the handler answers"},
			KeyHeader: "X-Idempotency-Key",
			Argv: func(s Setup, _ string) []string {
				return []string{filepath.Join(s.Bin, "fiberidem"), "-listen", s.Listen}
			},
		},
		node("express", "express-idempotency (redis)", "express-server.js",
			"express 4 + express-idempotency 1.0.6 + express-idempotency-redis-adapter 1.0.8; body compared on reuse (417); GET then SET, not atomic", 10),
		node("nestjs", "@node-idempotency/nestjs (redis)", "nest-server.js",
			"NestJS 10 + @node-idempotency/nestjs 1.0.4 + storage-adapter-redis; SET NX reservation; body hash checked (422)", 11),
		node("powertools", "AWS Powertools idempotency (redis)", "powertools-server.js",
			"@aws-lambda-powertools/idempotency 2.35.0, makeIdempotent + CachePersistenceLayer on @redis/client, in node:http; no payload check (see below)", 12),
	}
}

// durableProxy is cmd/durableproxy with appends synced appends a request.
func durableProxy(appends int, id, notes string) Contender {
	return Contender{
		Contender: results.Contender{ID: id, Name: "durable proxy (Pebble WAL, " + []string{1: "one synced append", 2: "two synced appends"}[appends] + ")",
			Kind: Baseline, Store: "pebble WAL", Notes: "httputil.ReverseProxy (as the plain proxy) with " + notes},
		KeyHeader:     "Idempotency-Key",
		NeedsUpstream: true,
		Argv: func(s Setup, dir string) []string {
			return []string{filepath.Join(s.Bin, "durableproxy"), "-listen", s.Listen, "-upstream", "http://" + s.Upstream,
				"-dir", filepath.Join(dir, "idem-data"), "-appends", fmt.Sprint(appends)}
		},
	}
}

func middleware(id, store string, storeDSN func(s Setup, dir string) string) Contender {
	return Contender{
		Contender: results.Contender{ID: id, Name: "idem middleware (" + store + ")", Kind: InProcess, Store: store, Baseline: "upstream",
			Notes: "idemhttp around the same handler, in one Go process"},
		KeyHeader: "Idempotency-Key",
		Argv: func(s Setup, dir string) []string {
			return []string{filepath.Join(s.Bin, "idemmw"), "-listen", s.Listen, "-store", storeDSN(s, dir)}
		},
	}
}
