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
}

func newScript(src string) *script {
	return &script{goredis: redis.NewScript(src), rueidis: rueidis.NewLuaScript(src)}
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
//
// fields lists them in the order every HMGET below and parseRecord use.
var fields = []string{"st", "tok", "fp", "bd", "sc", "k", "rid", "ca", "ua", "ea", "lu", "v"}

// Every script touches KEYS[1] only, so it runs on one cluster slot.

// reserveScript creates the record when absent or expired at now, takes over
// a stale in_progress record with the same fingerprint and binding when
// allowed, and otherwise returns the existing record's fields. It asks
// EXISTS before reading the fields: for a new key (a first call) an HMGET of
// twelve absent fields cost the server more than EXISTS does, 14.0-14.7
// against 16.0-17.1 µs of redis-server CPU a reservation (redis-benchmark,
// 32 clients, new keys, three alternated runs).
//
//	ARGV: now, takeover ("1" or "0"), pttl (ms),
//	      tok, fp, bd, sc, k, rid, ca, ua, ea, lu
//	returns 1 (created), 2 (took over), or the existing fields as HMGET gives them
var reserveScript = newScript(`
local took = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
	local cur = redis.call('HMGET', KEYS[1], 'st', 'tok', 'fp', 'bd', 'sc', 'k', 'rid', 'ca', 'ua', 'ea', 'lu', 'v')
	local now = tonumber(ARGV[1])
	if tonumber(cur[10]) > now then
		if ARGV[2] ~= '1' or cur[1] ~= 'in_progress' or tonumber(cur[11]) > now
			or cur[3] ~= ARGV[5] or cur[4] ~= ARGV[6] then
			return cur
		end
		took = 1
	end
	-- The old record may hold fields (a value) the new one lacks.
	redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'st', 'in_progress', 'tok', ARGV[4], 'fp', ARGV[5], 'bd', ARGV[6],
	'sc', ARGV[7], 'k', ARGV[8], 'rid', ARGV[9], 'ca', ARGV[10], 'ua', ARGV[11], 'ea', ARGV[12], 'lu', ARGV[13])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return took + 1
`)

// renewScript sets the lease of the in_progress record held by a token.
//
//	ARGV: tok, lu; returns 1, or 0 when the token does not hold the record
var renewScript = newScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
redis.call('HSET', KEYS[1], 'lu', ARGV[2])
return 1
`)

// completeScript moves the in_progress record held by a token to its final
// state and gives the key its new lifetime.
//
//	ARGV: tok, st, v, ua, ea, pttl (ms); returns 1, or 0 when the token does not hold the record
var completeScript = newScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
	return 0
end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'v', ARGV[3], 'ua', ARGV[4], 'ea', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
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
