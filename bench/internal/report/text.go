package report

// peersText says how each peer was set up and where it cannot match idem.
const peersText = `## Peers: how close to idem each could be configured

Each peer runs in the smallest server its documentation shows, with the same
operation inside, configured as close to idem's defaults (24 h TTL, request
fingerprint, one execution per key across concurrent calls) as it allows:

- **gofiber idempotency** (fiber v2.52.15, Go): in-memory storage and lock, both
  per process, so it cannot protect a key across replicas. Header
  ` + "`X-Idempotency-Key`" + `; keys must be exactly 36 characters by default (a short key
  is a 500). No request fingerprint: a retry with another body gets the first
  response. It keeps whatever status the handler answered, 5xx included
  (only an error the handler returns is not kept). A concurrent duplicate
  waits on the key's lock and then replays (idem answers 409 by default, or
  waits with ` + "`wait`" + `). Lifetime set to 24 h (its default is 30 min).
- **express-idempotency** 1.0.6 with **express-idempotency-redis-adapter** 1.0.8
  (express 4): reads the key with GET and then writes it with SET, two separate
  Redis calls, so two concurrent first calls can both run; the race table shows
  whether they did. Its "intent" check compares URL, method, query and the
  parsed body (a change is 417, not 422). It stores the response after sending
  it, without waiting: a retry that arrives right after the first response can
  still find the key in progress (409). Only ` + "`Content-Type`" + ` is kept among the
  headers. Keys are global to the Redis database (no scope or tenant).
- **@node-idempotency/nestjs** 1.0.4 with **storage-adapter-redis** (NestJS 10):
  reserves with ` + "`SET NX`" + `, so one execution per key; a concurrent duplicate gets
  409, a changed body 422 (a blake2 hash of the parsed JSON, so key order
  matters, unlike idem's canonical JSON). It is an interceptor: it replays
  what the handler returned (body and status), not the raw HTTP response.
  Decorators applied by hand in plain JavaScript, as TypeScript would.
- **AWS Powertools idempotency** 2.35.0 with ` + "`CachePersistenceLayer`" + ` on @redis/client,
  in node:http: it makes a function idempotent, not an HTTP route, so the
  server passes ` + "`{key, body}`" + ` to ` + "`makeIdempotent`" + `'s wrapper and maps its errors
  to HTTP (in progress: 409). It keeps the function's return value only.
  **No payload check**: with ` + "`payloadValidationJmesPath`" + ` every replay fails with
  IdempotencyValidationError, because this persistence layer writes the
  completed record without its payload hash (` + "`_updateRecord`" + `); so a retry with
  another body gets the first result. Outside Lambda there is no remaining
  time, so the harness registers a context that reports 60 s (idem's lease);
  without it, in-progress records never go stale and every call logs a warning.

`

// profileText is the analysis of where the gateway spends its time. It is
// written by hand from profiles taken with bench/profile.sh (and the
// gateway's own /debug/pprof) on this machine, so its figures are those
// profiles'; the tables above are the run's own.
const profileText = `## Profile: where the gateway's time goes

Taken with ` + "`bench/profile.sh [STORE] [SCENARIO]`" + ` or the gateway's own
` + "`/debug/pprof/`" + ` on its admin listener, under the harness's load (64
connections), and read next to the "CPU µs/req" column above.

**Fixed after the first profiles** (each measured back to back, then kept):

- The gateway's ` + "`httputil.ReverseProxy`" + ` had no ` + "`BufferPool`" + `: a 32 KiB copy buffer
  per request was 62% of the bytes it allocated. Pooled: +18-30% first calls
  on the embedded store.
- ` + "`idem serve`" + ` collects garbage at 4x the live heap instead of 2x (` + "`GOGC=400`" + `
  unless GOGC is set): +8-19%.
- ` + "`idem.CanonicalJSON`" + ` is one pass over the bytes instead of a
  ` + "`json.Decoder.Token`" + ` walk (the fingerprint was 13.6% of the in-process
  middleware's CPU, a third of it encoding/json building an error value
  per token): the middleware's allocations per request fell by a third.
- Lease renewal arms a timer instead of starting a goroutine and a ticker
  per call; the Redis pool is 64 connections (go-redis's default of 20 kept
  44 of 64 requests waiting).

Together: first calls on the embedded store went from 0.52x to about 0.7x
the plain proxy, replays from 2.1x to about 2.5x; the gateway on the memory
store now costs no more CPU per request than the plain proxy. (The plain
proxy is the standard library's, with only its idle connections raised: a
proxy given the same buffer pool and GC target would also gain.)

**Why first calls on the embedded store stay below 0.9x.** The gateway
spends about 130 µs of CPU per first call on the embedded store, against
about 80 µs on the memory store: the difference is the store, a Pebble read
(the check before the reservation, through the memtable skiplists and the
tables' filters: 16% of the profile) and two synced commits (commit
pipeline, WAL write, fdatasync: about 10%, plus the system calls). On two
cores shared with the load generator and the upstream, CPU per request sets
the throughput. The two syncs are the embedded store's promise (an
acknowledged reservation and outcome survive a crash); dropping the
reservation's fsync when the policy re-runs stale keys anyway
(` + "`on_stale: retry`" + `) measured +0-10% on a quiet disk and was not done, as
crash safety of every acknowledged write is what the store is for.

**PostgreSQL.** A first call is two round trips (the reserve statement, then
the completing UPDATE), each a synchronous commit, through a pool of 16
connections: about 6,000-7,000 such pairs per second is PostgreSQL's own
ceiling here (` + "`pgbench`" + ` in [docs/bench/STORES.md](docs/bench/STORES.md)), shared with
the rest of the machine. Even a replay is one round trip through the reserve
statement, which is why replays on PostgreSQL stay below the proxy; a read
before the reservation would speed replays and slow first calls.

**Redis.** Two ` + "`EVALSHA`" + ` round trips per first call; go-redis spends one write
and one read system call per command. A client with automatic pipelining
(rueidis) would batch concurrent requests' scripts; not tried yet.

**In-process middleware.** On the memory store it costs about 25 µs of CPU
per request over the bare handler (fingerprint, holding the response until
its outcome is recorded, the record, the replay headers); gofiber's
middleware costs almost nothing because it does much less (no fingerprint,
no tenant, a per-process lock, any status kept).

Store-level measurements (group commit on the embedded store, PostgreSQL
next to pgbench, Redis next to raw EVALSHA, cleanup of 1,000,000 expired
records among 1,000,000 live ones) are in
[docs/bench/STORES.md](docs/bench/STORES.md), written by ` + "`make bench-stores`" + `.

**Load generator.** vegeta's Go client burns more CPU per request than wrk
(the upstream alone reaches about 36,000 req/s here with vegeta on a quiet
machine, against 68,000 with wrk), so the fastest contenders (upstream, gofiber, idem's
in-process middleware) are partly limited by the load generator sharing
their cores; proxy contenders much less so.

`
