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
go test -run '^$' -bench 'Engine|Pairs' -benchtime 2s -count 1 ./store/memory ./store/file | tee "$tmp/local.txt" >&2
echo "stores: middleware benchmarks" >&2
go test -run '^$' -bench 'Middleware' -benchtime 2s -count 1 ./idemhttp | tee "$tmp/mw.txt" >&2
echo "stores: PostgreSQL next to pgbench" >&2
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5} ROUNDS=${ROUNDS:-3} env -u LONG ./store/postgres/bench.sh | tee "$tmp/pg.txt" >&2
echo "stores: Redis next to raw EVALSHA" >&2
go test -run '^$' -bench 'PairsInterleaved' -benchtime 2s -count 3 ./store/redis | tee "$tmp/redis.txt" >&2
if [ -n "${LONG:-}" ]; then
  echo "stores: cleanup of 1M expired among 1M live on PostgreSQL" >&2
  IDEM_LONG=1 go test -count=1 -v -timeout 60m -run '^TestCleanupMillion$' ./store/postgres | tee "$tmp/cleanup.txt" >&2
fi

# metric FILE NAME UNIT: the value before UNIT on the line of benchmark NAME.
metric() { awk -v n="$2" -v u="$3" '$1 ~ "^"n"(-[0-9]+)?$" { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$1" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

f1=$(metric "$tmp/local.txt" BenchmarkPairs/c1/store pairs/s)
f64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/store pairs/s)
p64=$(metric "$tmp/local.txt" BenchmarkPairs/c64/pebble pairs/s)

{
  echo "# Stores, engine and middleware: go test benchmarks"
  echo
  echo "Written by \`bench/stores.sh\` (\`make bench-stores\`) on $(date -u '+%Y-%m-%d %H:%M UTC'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). $(nproc) cores. Raw output below; every ratio is computed from it by the script."
  echo
  echo "## Embedded store: group commit"
  echo
  echo "Durable reserve+complete pairs (each write one synced Pebble commit), the store next to a raw Pebble loop doing the same synced writes, in one run:"
  echo
  echo "| | pairs/s |"
  echo "|---|---:|"
  echo "| store, concurrency 1 | $f1 |"
  echo "| store, concurrency 64 | $f64 |"
  echo "| raw Pebble, concurrency 64 | $p64 |"
  echo "| **store c64 / store c1** (goal >= 4) | **$(ratio "$f64" "$f1")** |"
  echo "| **store c64 / raw c64** (goal >= 0.7) | **$(ratio "$f64" "$p64")** |"
  echo
  echo "## Engine (\`Do\`): first executions and replays"
  echo
  echo "| store | first c1 exec/s | first c64 exec/s | replay c1 /s | replay c64 /s |"
  echo "|---|---:|---:|---:|---:|"
  for s in memory file; do
    f="$tmp/local.txt"
    # go test prints one package's benchmarks after its "pkg:" line.
    awk -v p="store/$s\$" '/^pkg:/ { on = ($2 ~ p) } on' "$f" > "$tmp/$s.txt"
    echo "| $s | $(metric "$tmp/$s.txt" BenchmarkEngine/first/c1 executions/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/first/c64 executions/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/replay/c1 replays/s) | $(metric "$tmp/$s.txt" BenchmarkEngine/replay/c64 replays/s) |"
  done
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
