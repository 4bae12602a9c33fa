#!/bin/sh
# bench.sh: Reserve+Complete pairs per second through the postgres store next
# to the same two SQL statements run raw by pgbench -M prepared, at
# concurrency 1, 16 and 64, 1 KiB values, on the same server in the same
# run, alternating which side goes first. Prints both and their ratio.
#
#   store/postgres/bench.sh                 # 2 rounds of 10 s per cell
#   SECONDS_PER_RUN=5 ROUNDS=3 store/postgres/bench.sh
#   LONG=1 store/postgres/bench.sh          # also the 1M-record cleanup
#
# The server is IDEM_TEST_POSTGRES (default: the local test server).
set -eu
cd "$(dirname "$0")"
export IDEM_BENCH=1
export IDEM_BENCH_SECONDS="${SECONDS_PER_RUN:-10}"
export IDEM_BENCH_ROUNDS="${ROUNDS:-2}"
run='^TestCompareWithPgbench$'
if [ -n "${LONG:-}" ]; then
	export IDEM_LONG=1
	run='^(TestCompareWithPgbench|TestCleanupMillion)$'
fi
go test -count=1 -v -timeout 60m -run "$run" . |
	grep -v -e '^=== ' -e '^PASS' -e '^ok ' | sed 's/^ *[a-z_]*_test\.go:[0-9]*: //'
