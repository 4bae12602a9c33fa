#!/usr/bin/env bash
# Runs idem's benchmark harness: builds the contenders and idem, installs
# the Node peers, starts PostgreSQL and Redis if needed, measures every
# contender and writes BENCHMARKS.md and docs/bench/ at the repository root.
#
#   bench/run.sh                      # the full run, duels included (about 25 minutes on 2 cores)
#   BENCH_SCALE=full bench/run.sh     # adds 10^7 live keys on PostgreSQL
#   bench/run.sh -rounds 1 -duration 2s -scale quick   # a quick look
#   bench/run.sh -report-only         # rebuild the report from docs/bench/results.json
#   bench/run.sh -duels-only          # only the duels that decide the goals (6-7 minutes)
#   bench/run.sh -churn -footprint file=10000000,pebble=1000000   # adds the file store's churn and the stores at scale
#
# Extra arguments go to the harness (go run ./cmd/bench -h lists them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$here"

report_only=false
for a in "$@"; do [ "$a" = "-report-only" ] && report_only=true; done

mkdir -p bin
# -mod=mod: idem's own dependencies may have grown since bench/go.sum was
# last tidied; let the build record them rather than fail.
go build -mod=mod -o bin/ ./cmd/bench ./cmd/upstream ./cmd/plainproxy ./cmd/durableproxy ./cmd/idemmw ./cmd/refmw ./cmd/fiberidem ./cmd/storescale
go test -mod=mod -c -o bin/inproc.test ./internal/inproc
# The file store's BenchmarkAnchor (log1 against wal1, -append-pairs).
(cd "$root" && go test -c -o "$here/bin/fileanchor.test" ./store/file)
if ! $report_only; then
  # Without idem the gateway contenders are reported as not run, rather
  # than losing the whole run.
  rm -f bin/idem
  (cd "$root" && go build -o "$here/bin/idem" ./cmd/idem) || echo "run.sh: idem did not build; the gateway contenders will not run" >&2
  "$root/scripts/services.sh"
  ./peers/install.sh || echo "run.sh: the Node peers did not install; they will not run" >&2
fi

cmd="bench/run.sh"
[ -n "${BENCH_SCALE:-}" ] && cmd="BENCH_SCALE=$BENCH_SCALE $cmd"
[ $# -gt 0 ] && cmd="$cmd $*"
exec ./bin/bench -root "$root" -scale "${BENCH_SCALE:-default}" -command "$cmd" "$@"
