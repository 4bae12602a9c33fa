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
  (only an error the handler returns is not recorded). A concurrent duplicate
  waits on the key's lock and then replays (idem answers 409 by default, or
  waits with ` + "`wait`" + `). Lifetime set to 24 h (its default is 30 min).
- **express-idempotency** 1.0.6 with **express-idempotency-redis-adapter** 1.0.8
  (express 4): reads the key with GET and then writes it with SET, two separate
  Redis calls, so two concurrent first calls can both run; the race table shows
  whether they did. Its "intent" check compares URL, method, query and the
  parsed body (a change is 417, not 422). It stores the response after sending
  it, without waiting: a retry that arrives right after the first response can
  still find the key in progress (409). Only ` + "`Content-Type`" + ` is replayed among the
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

**Fixed in the second round** (profiles per request, A/B against the
previous build in one run):

- Calls with an answer deadline (every gateway route) ran on a new
  goroutine each, whose stack the runtime grew by copying as the call went
  through the engine, the store and the proxy: 5% of the gateway's CPU.
  They now run on workers kept between calls (` + "`idemhttp/internal/workers`" + `).
- ` + "`httputil.ReverseProxy`" + ` wraps the request body, so the Transport could not
  tell it was in memory and flushed the headers before the body: two
  writes and two packets to the upstream per request. The gateway hands it
  the body it already read: one write (` + "`TestRequestIsOneWrite`" + `).
- The embedded store: segments written with zeros ahead of the frames, off
  the writers' path (an fsync then commits neither a new size nor newly
  written blocks: 45-63 µs of CPU a sync, 75-86 in fallocated space, 90-107
  appending; in BenchmarkPairs at 64 writers 1.3-1.8x the pairs/s at
  0.7-0.85x the CPU a pair of fallocated segments), an expiry index
  of one-second buckets instead of a B-tree (5 µs a request under load), and
  a syncer that yields once before taking the buffer when the last sync
  covered several writers (bytes per fsync about 3,000 -> 5,500).
- The memory store and the embedded store's index keep records packed (one
  string, integer times; the memory store's keyed by 32 bytes with the
  value inside): one object a record for the garbage collector instead of
  about eight.

**Fixed in the third round** (each A/B against the build before it, in
go test -bench and in duels of the harness):

- The embedded and memory stores' expiry index keeps the current second's
  bucket sorted as items arrive (a binary search in its last 1,024 items),
  so cleanups no longer sort it again: 0.54 µs of CPU per first call in the
  middleware's profile gone, adding 0.42 -> 0.13 µs.
- The fingerprint writes an object's members in one pass when they come in
  name order, as most encoders write them: 690 -> 510 ns for a 55-byte body
  (BenchmarkHashRequest).
- The operation's context makes its cancelable part only when something
  asks for Done (or the lease is lost): below net/http, registering a
  context with the request's allocated a map per call. The middleware's
  first calls: +6.5 µs of CPU over net/http against +7.3. (Undone by
  issue 39 with the next: docs/bench/GATEWAY.md.)
- One renewal schedule per lease length instead of a timer per hold: two
  allocations fewer per first call.

**Fixed in the fourth round** (allocations counted; the CPU saved was
below what the duels of that day could resolve):

- The gateway's upstream call has a context of its own: one timer for
  every call's deadline (they all get the same, so the calls in start
  order are in deadline order), Abort, and the operation's end through the
  operation context's AfterFunc, where context.WithTimeout made a timer per
  call and, by asking the operation's context for Done, its cancelable
  part and a map of children. BenchmarkGateway's first calls: 238 -> 233
  allocations (client, gateway and upstream together). Undone by issue 39:
  the standard library's contexts measured within the noise of two
  gateway duels (docs/bench/GATEWAY.md).
- Under an answer deadline (every gateway route) the request's goroutine
  waits on one event: the handler arms the deadline's timer as it starts,
  and the timer sends its own event, where a start event and a select on
  the timer woke it twice per call.
- The embedded store's index keeps its entries (128 bytes) in the maps'
  own slots instead of one object per record: in BenchmarkPairs at 64
  writers, 1.9 µs less CPU per durable reserve+complete pair (median of 8
  alternated runs, 7 of them lower) and two allocations fewer, for 6-18%
  more heap per key.

**Why first calls on the embedded store sit near 0.9x.** Profiled under
this load, a first call costs the gateway about 85 µs of CPU on the
embedded store. The store's own share is about 11 µs: two fdatasyncs
(reservation and outcome, each required before acknowledging) shared by
the writes of many calls, about 5 µs a call, plus the write system call,
the index and the frame. The rest is the same work done at a lower rate:
with each call waiting for two fsyncs, the sockets, the scheduler and the
garbage collector batch less per call. On two cores shared with the load
generator and the upstream, CPU per request sets the throughput, and the
duels of one day vary by about the distance to the goal (0.88x to 0.92x
on two days of this round).

**PostgreSQL.** A first call is two round trips (the reserve statement, then
the completing UPDATE), each a synchronous commit, through a pool of 16
connections: about 6,000-7,000 such pairs per second is PostgreSQL's own
ceiling here (` + "`pgbench`" + ` in [docs/bench/STORES.md](docs/bench/STORES.md)), shared with
the rest of the machine. A replay is one read of a live row (no row lock,
no WAL): about 62-75 µs of CPU in the gateway and 50-65 µs in PostgreSQL.

**Redis.** Two ` + "`EVALSHA`" + ` round trips per first call through rueidis: redis-server
spends about 30 µs of CPU a call (the reserve script about 5 µs of it; the
rest is the protocol and the sockets), and the gateway about 14 µs in
rueidis's write loop alone. Flush delays and pipelining settings did not
change the CPU per call; fewer round trips would.

**In-process middleware.** On the memory store, under this load, it costs
about 6.5 µs of CPU per first call over the bare handler. Its own parts,
per call: the store's reservation and completion (2.4 µs; a third of it the
first look-up of the key in a map of a million records, which misses the
cache), holding and encoding the response and copying it out (1 µs), the
fingerprint and key hash (two SHA-256 and the canonical JSON, 0.9 µs), the
handler's own copy of the request with the request ID and token (0.8 µs),
reading the body under its deadline (0.45 µs), the lease (0.2 µs); plus
the garbage collector's share. (Matching the route took 0.3 µs until a
route of a method and a literal path, as here, was matched without the
ServeMux.) A replay costs about 3 µs: the same body, fingerprint, key and
look-up (1.35 µs in the engine and the store, a third of it copying the
stored value out), then the stored response written out. gofiber's middleware does much less (no fingerprint,
no tenant, no lease, a per-process lock, any status kept), and its
overhead over fiber is 2-3 µs on a first call and under 1 µs on a replay:
with the fingerprint and the key hash alone costing idem about 1 µs, the
goal of an overhead no larger than gofiber's is not reached by trimming.
The duels of "idem middleware (memory, lean)" show idem configured as
gofiber's middleware works (no fingerprint, no tenants, no body deadline):
the difference from the default row is what those features cost here, and
what remains is the lease, the token and the durable record's semantics.

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
