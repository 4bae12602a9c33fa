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
// written by hand from profiles taken with bench/profile.sh during the
// harness's development (same machine, other builds running), so its
// figures are those profiles', not this run's; the tables above are the
// run's own.
const profileText = `## Profile: where the gateway's time goes

Taken with ` + "`bench/profile.sh [STORE] [SCENARIO]`" + ` (the gateway wired as ` + "`idem serve`" + `
wires it, plus net/http/pprof; the harness's load, 64 connections; a 10 s CPU
profile, the allocations and a goroutine dump mid-run) and the "CPU µs/req"
column above. The CPU shares come from profiles taken while other work ran
on the machine; the fixes' gains were measured back to back once it was
quiet. Compare them with each other rather than with the tables.

**First calls on the embedded store: the 0.9x goal is not met.** Two things
limit it.

1. *CPU per request.* The plain proxy burns about 85 µs of CPU per request,
   the gateway about 125 µs on the memory store and about 190 µs on the
   embedded store. On two cores shared with the load generator and the
   upstream, CPU per request sets the throughput. The gateway's CPU on
   first calls, embedded store:
   - memory management, about 25% (allocation 17%, GC marking 9%). 62% of
     every byte the gateway allocates is ` + "`httputil.ReverseProxy`" + `'s 32 KiB copy
     buffer, allocated afresh for each request because the gateway's proxy
     has no ` + "`BufferPool`" + `;
   - ` + "`httputil.ReverseProxy`" + ` itself, about 15%;
   - the store's read before its write in ` + "`Reserve`" + ` (a Pebble ` + "`Get`" + ` through the
     memtable skiplists), about 11%;
   - two synced commits per first call (` + "`Reserve`" + `, then ` + "`Complete`" + `): commit
     pipeline, WAL write and fdatasync, about 12%;
   - the body's fingerprint (canonical JSON), about 4%; in the in-process
     middleware on the memory store it is the largest single cost, 13.6% of
     the process's CPU, a third of that in encoding/json building a syntax
     error value per token (` + "`json.Decoder.Token`" + ` reads each scalar through
     ` + "`readValue`" + `, whose scanner "fails" at the delimiter that follows it).
2. *Waiting for the disk.* Each first call waits for two fsyncs in sequence.
   Group commit shares them between concurrent requests but does not shorten
   the wait. How much that costs depends on what else uses the disk: while
   other work loaded it, committing every store write without sync (a
   measurement, not a proposal) served 35-100% more first calls; on the
   quiet machine, dropping only Reserve's sync gained 0-10%.

Fixes, each measured back to back (5 s runs, 64 connections, three pairs)
on an experimental copy of idem on the quiet machine; not applied, the
packages are not the harness's to change:

- **internal/gateway: give the ReverseProxy a BufferPool** (a ` + "`sync.Pool`" + ` of
  32 KiB buffers, ten lines): first calls on the embedded store +18-30%
  (5,600 -> 6,600-7,200 req/s), replays +2-3%.
- **GC target:** the same gateway under ` + "`GOGC=400`" + ` served 8-19% more first
  calls. The gateway could raise its GC target (or set a memory limit) by
  default, or the docs could say so.
- **store/file: do not fsync Reserve when the policy re-runs stale keys**
  (` + "`on_stale: retry`" + `, the default). A crash then loses in-flight reservations,
  whose operations the default policy would run again once their lease ran
  out anyway: a synced reservation only turns that re-run into up to 60 s of
  409s. ` + "`Complete`" + `'s fsync makes every earlier WAL entry durable, so recorded
  outcomes stay crash-safe. Keep the sync under ` + "`on_stale: conflict`" + `.
  Measured on top of the BufferPool: +0-10% on the quiet machine, more when
  the disk is busy.
- All three together: 7,200-8,000 req/s, about 0.7x the plain proxy. The
  rest of the gap is CPU: about 190 µs per first call against the proxy's
  85 µs, on two cores that the load generator and the upstream share. 0.9x
  would take a first call costing the gateway little more than proxying
  does, which two store writes, a fingerprint and a recorded response do
  not allow here; on a machine with cores to spare the gateway is bound by
  the fsync wait instead, and group commit scales with concurrency.
- **idem.CanonicalJSON: one pass over the bytes** instead of a
  ` + "`json.Decoder.Token`" + ` walk (or decode with ` + "`UseNumber`" + ` into ` + "`any`" + ` after a
  duplicate-key check, and re-encode: ` + "`json.Marshal`" + ` sorts map keys). It
  would remove most of the fingerprint's cost and its garbage.
- **Engine.renew: arm a ` + "`time.AfterFunc`" + ` at a third of the lease** instead of
  starting a goroutine and a ticker for every call: a call shorter than
  that (nearly all of them) would then cost no goroutine at all.
- **internal/dsn, Redis:** go-redis's default pool is 10 connections per
  core, 20 here; mid-run, 44 of the gateway's 64 requests were waiting for
  one. ` + "`?pool_size=64`" + ` changed little on this busy machine (the round trips
  themselves were slow), but a default sized for a gateway's concurrency, as
  the PostgreSQL pool already has (16), would avoid the queue.
- **store/redis: fewer system calls per command.** In the in-process
  middleware on Redis, go-redis takes a third of the CPU, most of it one
  write and one read system call per ` + "`EVALSHA`" + `, plus its pool's
  bookkeeping (10%). AWS Powertools, one Node thread on node-redis (which
  pipelines the commands issued in one event-loop turn), keeps up with it
  on the same two round trips per first call. A client with automatic
  pipelining (rueidis, which resolves here) would batch the concurrent
  requests' scripts into shared writes.

What limits the other stores: on PostgreSQL a first call is two round trips
(the reserve statement, then the completing UPDATE), each a synchronous
commit, through a pool of 16 connections: about 5,000 such pairs per second
is PostgreSQL's own ceiling here (pgbench, ENVIRONMENT.md), shared with the
rest of the machine; even a replay is a round trip through the reserve
statement, which is why replays on PostgreSQL stay below the proxy. On Redis, two ` + "`EVALSHA`" + ` round trips per first call. The
memory store keeps every record on the Go heap, so GC marking grows with the
live keys: 26% of the in-process middleware's CPU on first calls.

**Replays: the 1.5x goal is met.** A replay costs the gateway about 40 µs of
CPU, half of what proxying costs, and no upstream call: it reads the record
(no write, no fsync) and writes the stored response.

**Load generator.** vegeta's Go client burns more CPU per request than wrk
(the upstream alone reaches about 36,000 req/s here with vegeta on a quiet
machine, against 68,000 with wrk), so the fastest contenders (upstream, gofiber, idem's
in-process middleware) are partly limited by the load generator sharing
their cores; proxy contenders much less so.

`
