package redisstore

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// script is one Lua transition, ready for either client: go-redis sends it
// with EVALSHA (EVAL when the server lacks it), and so does rueidis.
type script struct {
	goredis *redis.Script
	rueidis *rueidis.Lua
	// src is the source, for EVAL after a NOSCRIPT when the store sends
	// the script itself (evalWait).
	src string
}

func newScript(src string) *script {
	return &script{goredis: redis.NewScript(src), rueidis: rueidis.NewLuaScript(src), src: src}
}

// Hash is the script's SHA1, as EVALSHA names it.
func (s *script) Hash() string { return s.goredis.Hash() }

// A record is one Redis hash with these fields; the field names are short
// because they are repeated in every record.
//
//	st   state: in_progress | succeeded | failed
//	tok  token, decimal (a Lua number is a double and would lose bits of a uint64)
//	fp   fingerprint
//	bd   binding
//	sc   scope
//	k    raw key (a field value, never part of a Redis key name)
//	rid  request ID
//	ca   created at  } Unix microseconds, decimal: exact in a double until
//	ua   updated at  } the year 2255, so Lua compares them without rounding
//	ea   expires at  }
//	lu   lease until }
//	v    value (absent while in_progress)
//	sv   "1": the times above are Redis's own clock (TIME)
//
// Records written before sv existed hold their writer's clock instead, and
// lack it: an earlier version wrote every hash afresh (DEL, then HSET) and
// never sets it. Such a record stays readable, and is judged without
// comparing its times with Redis's clock (see Store.judge). ea and lu are
// still written, on Redis's clock, for the replicas of an earlier version
// that read them during a rolling upgrade.
//
// fields lists them in the order every HMGET below and parseRecord use.
var fields = []string{"st", "tok", "fp", "bd", "sc", "k", "rid", "ca", "ua", "ea", "lu", "v", "sv"}

// Every script touches KEYS[1] only, so it runs on one cluster slot, and
// reads the clock of the node that holds it, which is the clock its key's
// expiry runs on. Scripts are replicated by their effects (Redis 5 and
// later), so TIME in a script that writes is allowed.
//
// clock is the scripts' common start: now, Redis's clock in microseconds
// (TIME), and num, which writes a whole number of microseconds as
// decimal digits (a Lua number would be sent as %.17g).
const clock = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function num(x) return string.format('%.0f', x) end
`

// read is the reply of a script that found the record: its fields as
// HMGET gives them, then Redis's clock (µs) and the key's PTTL (ms), read
// in the same script.
const read = `
local function read(cur)
	cur[14] = now
	cur[15] = redis.call('PTTL', KEYS[1])
	return cur
end
`

// hmget is the HMGET of every field, in the order of fields.
const hmget = `redis.call('HMGET', KEYS[1], 'st', 'tok', 'fp', 'bd', 'sc', 'k', 'rid', 'ca', 'ua', 'ea', 'lu', 'v', 'sv')`

// reserveScript creates the record when absent (an expired record is
// absent: Redis dropped it), takes over a stale in_progress record with the
// same fingerprint and binding when allowed, and otherwise returns the
// existing record as read does. It asks EXISTS before reading the fields:
// for a new key (a first call) an HMGET of twelve absent fields costs the
// server more than EXISTS does (docs/bench/STORE-DESIGN.md).
//
// A record on Redis's clock (sv) is stale once its lu has passed on it. A
// record of an earlier version is stale only when it is the very version,
// token and lu, that the caller watched unchanged for a whole lease (wtok,
// wlu; empty when none).
//
//	ARGV: takeover ("1" or "0"), lease (µs), ttl (ms),
//	      tok, fp, bd, sc, k, rid, wtok, wlu
//	returns 1 (created), 2 (took over), or the existing record as read
var reserveScript = newScript(clock + read + `
local took = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
	local cur = ` + hmget + `
	local stale
	if cur[13] then
		stale = tonumber(cur[11]) <= now
	else
		stale = cur[2] == ARGV[10] and cur[11] == ARGV[11]
	end
	if ARGV[1] ~= '1' or cur[1] ~= 'in_progress' or not stale
		or cur[3] ~= ARGV[5] or cur[4] ~= ARGV[6] then
		return read(cur)
	end
	took = 1
	-- The old record may hold fields (a value) the new one lacks.
	redis.call('DEL', KEYS[1])
end
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'st', 'in_progress', 'tok', ARGV[4], 'fp', ARGV[5], 'bd', ARGV[6],
	'sc', ARGV[7], 'k', ARGV[8], 'rid', ARGV[9], 'ca', num(now), 'ua', num(now),
	'ea', num(now + ttl * 1000), 'lu', num(now + tonumber(ARGV[2])), 'sv', '1')
redis.call('PEXPIRE', KEYS[1], ttl)
return took + 1
`)

// getScript returns the record as read does, or an empty reply when the key
// is absent (expired records are: Redis dropped them).
var getScript = newScript(clock + read + `
local cur = ` + hmget + `
if not cur[1] then
	return {}
end
return read(cur)
`)

// renewScript sets the lease of the in_progress record held by a token to
// run lease from Redis's now.
//
//	ARGV: tok, lease (µs); returns 1, or 0 when the token does not hold the record
var renewScript = newScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
` + clock + `
redis.call('HSET', KEYS[1], 'lu', num(now + tonumber(ARGV[2])))
return 1
`)

// completeScript moves the in_progress record held by a token to its final
// state and gives the key its new lifetime.
//
//	ARGV: tok, st, v, ttl (ms); returns 1, or 0 when the token does not hold the record
var completeScript = newScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
` + clock + `
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'v', ARGV[3], 'ua', num(now), 'ea', num(now + ttl * 1000))
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// releaseScript deletes the in_progress or failed record held by a token.
//
//	ARGV: tok; returns 1, or 0 when the token does not hold the record
var releaseScript = newScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if (cur[1] ~= 'in_progress' and cur[1] ~= 'failed') or cur[2] ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
return 1
`)
