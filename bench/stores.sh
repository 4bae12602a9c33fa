#!/usr/bin/env bash
# Runs the go test benchmarks of the engine, the stores and the middleware,
# and the shared stores next to their raw floor (pgbench for PostgreSQL, raw
# EVALSHA for Redis), all in one run, and writes docs/bench/STORES.md with
# the raw output and the ratios computed from it. Nothing is copied by hand.
#
#   bench/stores.sh                 # about 6 minutes
#   LONG=1 bench/stores.sh          # adds the 1M-expired-among-1M-live cleanup on PostgreSQL
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/bench/STORES.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./scripts/services.sh

echo "stores: engine and embedded store benchmarks" >&2
go test -run '^$' -bench 'Engine|Pairs' -benchtime 2s -count 1 ./store/memory ./store/file ./store/pebble | tee "$tmp/local.txt" >&2
echo "stores: middleware over the bare handler (15 paired runs)" >&2
go test -c -o "$tmp/idemhttp.test" ./idemhttp
(cd bench && go run ./cmd/mwcost -test "$tmp/idemhttp.test" -runs "${MW_RUNS:-15}") >"$tmp/mwcost.md" 2>"$tmp/mw.txt"
cat "$tmp/mwcost.md" >&2
echo "stores: PostgreSQL next to pgbench" >&2
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5} ROUNDS=${ROUNDS:-3} env -u LONG ./store/postgres/bench.sh | tee "$tmp/pg.txt" >&2
echo "stores: Redis next to raw EVALSHA" >&2
go test -run '^$' -bench 'PairsInterleaved' -benchtime 2s -count 3 ./store/redis | tee "$tmp/redis.txt" >&2
echo "stores: Redis clients (go-redis, rueidis)" >&2
go test -run '^$' -bench 'Clients' -benchtime 20000x -count 2 ./store/redis | tee "$tmp/clients.txt" >&2
if [ -n "${LONG:-}" ]; then
  echo "stores: cleanup of 1M expired among 1M live on PostgreSQL" >&2
  IDEM_LONG=1 go test -count=1 -v -timeout 60m -run '^TestCleanupMillion$' ./store/postgres | tee "$tmp/cleanup.txt" >&2
fi

# metric FILE NAME UNIT: the value before UNIT on the line of benchmark NAME.
metric() { awk -v n="$2" -v u="$3" '$1 ~ "^"n"(-[0-9]+)?$" { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$1" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

f1=$(metric "$tmp/local.txt" BenchmarkPairs/c1/log pairs/s)
f64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/log pairs/s)
p1=$(metric "$tmp/local.txt" BenchmarkPairs/c1/pebble pairs/s)
p64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/pebble pairs/s)
fc1=$(metric "$tmp/local.txt" BenchmarkPairs/c1/log cpu-µs/op)
fc64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/log cpu-µs/op)
pc1=$(metric "$tmp/local.txt" BenchmarkPairs/c1/pebble cpu-µs/op)
pc64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/pebble cpu-µs/op)

{
  echo "# Stores, engine and middleware: go test benchmarks"
  echo
  echo "Written by \`bench/stores.sh\` (\`make bench-stores\`) on $(date -u '+%Y-%m-%d %H:%M UTC'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). $(nproc) cores. Raw output below; every ratio is computed from it by the script."
  echo
  echo "## Embedded store: group commit"
  echo
  echo "Durable reserve+complete pairs through the embedded store (file:, a log with its index in memory) and, side by side in the same run, through the Pebble store (pebble:), at concurrency 1 and 64 (\`BenchmarkPairs\` in store/file). CPU is the process's own (user + system) per pair:"
  echo
  echo "| | pairs/s | CPU µs/pair |"
  echo "|---|---:|---:|"
  echo "| log, concurrency 1 | $f1 | $fc1 |"
  echo "| Pebble, concurrency 1 | $p1 | $pc1 |"
  echo "| log, concurrency 64 | $f64 | $fc64 |"
  echo "| Pebble, concurrency 64 | $p64 | $pc64 |"
  echo "| **log c64 / log c1** (group commit, goal >= 4) | **$(ratio "$f64" "$f1")** | |"
  echo "| **log c64 / Pebble c64** | **$(ratio "$f64" "$p64")** | **$(ratio "$pc64" "$fc64")x less CPU** |"
  echo
  echo "## Engine (\`Do\`): first executions and replays"
  echo
  echo "| store | first c1 exec/s | first c64 exec/s | replay c1 /s | replay c64 /s |"
  echo "|---|---:|---:|---:|---:|"
  for s in memory file pebble; do
    f="$tmp/local.txt"
    # go test prints one package's benchmarks after its "pkg:" line.
    awk -v p="store/$s\$" '/^pkg:/ { on = ($2 ~ p) } on' "$f" > "$tmp/$s.txt"
    echo "| $s | $(metric "$tmp/$s.txt" BenchmarkEngine/first/c1 executions/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/first/c64 executions/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/replay/c1 replays/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/replay/c64 replays/s) |"
  done
  echo
  echo "## Middleware over the bare handler"
  echo
  echo "What idem's middleware adds to a bare net/http handler in process, on the memory store (\`BenchmarkMiddleware\` in idemhttp: a JSON POST answered with 66 bytes of JSON; first: a new key every request; replay: one of 1,024 answered keys). Each run measures the bare handler, first executions and replays one after the other (\`-benchtime 300ms\`); an overhead is the difference within a run, and the table gives the median and interquartile range over the runs (\`bench/cmd/mwcost\`). ns/op is wall time with both cores serving, as \`go test -bench\` reports it; CPU ns/op is the process's user+system time per request."
  echo
  cat "$tmp/mwcost.md"
  echo
  echo "## Shared stores next to their raw floor"
  echo
  echo "PostgreSQL: the store's reserve and complete next to the same two statements run by \`pgbench -M prepared\` (\`store/postgres/bench.sh\`):"
  echo
  echo '```'
  cat "$tmp/pg.txt"
  echo '```'
  echo
  echo "Redis: the store next to the same two \`EVALSHA\` calls with prebuilt arguments, in alternating chunks (\`BenchmarkPairsInterleaved\`, 3 runs):"
  echo
  echo "| concurrency | store pairs/s | raw pairs/s | store/raw |"
  echo "|---|---:|---:|---:|"
  for c in 1 16 64; do
    awk -v n="BenchmarkPairsInterleaved/c$c" '$1 ~ "^"n"(-[0-9]+)?$" { s = r = q = ""; for (i = 2; i <= NF; i++) { if ($i == "store-pairs/s") s = $(i-1); if ($i == "raw-pairs/s") r = $(i-1); if ($i == "store/raw") q = $(i-1) } printf "| c%s | %.0f | %.0f | %.2f |\n", substr(n, 28), s, r, q }' "$tmp/redis.txt"
  done
  echo
  echo "Redis clients: the store's two scripts sent by SHA with prebuilt arguments through go-redis and through rueidis, in alternating chunks (\`BenchmarkClients\`, 2 runs); the gateway uses rueidis:"
  echo
  echo "| concurrency | go-redis pairs/s | rueidis pairs/s | go-redis CPU µs/pair | rueidis CPU µs/pair |"
  echo "|---|---:|---:|---:|---:|"
  for c in 1 16 64; do
    awk -v n="BenchmarkClients/c$c" '$1 ~ "^"n"(-[0-9]+)?$" { g = r = gc = rc = ""; for (i = 2; i <= NF; i++) { if ($i == "goredis-pairs/s") g = $(i-1); if ($i == "rueidis-pairs/s") r = $(i-1); if ($i == "goredis-cpu-µs/pair") gc = $(i-1); if ($i == "rueidis-cpu-µs/pair") rc = $(i-1) } printf "| c%s | %.0f | %.0f | %.1f | %.1f |\n", substr(n, 19), g, r, gc, rc }' "$tmp/clients.txt"
  done
  if [ -f "$tmp/cleanup.txt" ]; then
    echo
    echo "## Cleanup: 1,000,000 expired records among 1,000,000 live ones (PostgreSQL)"
    echo
    echo '```'
    grep -v -e '^=== ' -e '^--- ' -e '^PASS' -e '^ok ' "$tmp/cleanup.txt" | sed 's/^ *[a-z_]*_test\.go:[0-9]*: //'
    echo '```'
  fi
  echo
  echo "## Raw output"
  echo
  echo '```'
  cat "$tmp/local.txt" "$tmp/mw.txt" "$tmp/redis.txt" | grep -E '^(Benchmark|pkg:|goos|cpu)'
  echo '```'
} > "$out"
echo "stores: wrote $out" >&2
