#!/usr/bin/env bash
# Duels two builds of the gateway: `idem serve` built from git revision
# BASE and from the working tree, each on its own port and its own store, in
# front of one upstream. The load (bench/cmd/loadgen, 64 connections) goes
# to one for SLICE, then to the other, in the order A B B A A B ..., so that
# adjacent slices see nearly the same machine; each pair gives a throughput
# ratio and a difference of the gateway process's CPU per request (from
# /proc). On this shared machine, where CPU per request moves 20-40% from
# one few-second window to the next, this is how a change of a few percent
# is told apart from the noise; the harness's duels compare a contender
# with its baseline, not two builds.
#
#   bench/builds.sh [BASE] [PAIRS] [SLICE] [SCENARIO] [STORE]
#   defaults:        HEAD   16      1s      first      file  (or pebble, redis)
#
# PORT_BASE (default 18080) moves its ports (PORT_BASE to PORT_BASE+111),
# so that two duels can run at once without stopping each other's gateways.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
base=${1:-HEAD}
pairs=${2:-16}
slice=${3:-1s}
scenario=${4:-first}
kind=${5:-file}
work=$(mktemp -d /tmp/idem-builds.XXXXXX)
pb0=${PORT_BASE:-18080}
port_up=$pb0 port_a=$((pb0 + 1)) port_b=$((pb0 + 11)) admin_a=$((pb0 + 101)) admin_b=$((pb0 + 111))
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	git -C "$root" worktree remove --force "$work/src" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

cd "$here"
go build -mod=mod -o bin/ ./cmd/upstream ./cmd/loadgen
git -C "$root" worktree add --detach -q "$work/src" "$base"
(cd "$work/src" && go build -o "$work/idem-base" ./cmd/idem)
(cd "$root" && go build -o "$work/idem-tree" ./cmd/idem)

store() { # the store DSN of side $1 (0 or 1)
	case $kind in
	file) echo "file:$work/store-$1" ;;
	pebble) echo "pebble:$work/store-$1" ;;
	redis)
		redis-cli -n $((14 + $1)) flushdb >/dev/null
		echo "redis://127.0.0.1:6379/$((14 + $1))"
		;;
	*) echo "builds.sh: store $kind: file, pebble or redis" >&2; exit 2 ;;
	esac
}
bin/upstream -listen 127.0.0.1:$port_up >"$work/upstream.log" 2>&1 & pids+=($!)
"$work/idem-base" serve --listen 127.0.0.1:$port_a --upstream http://127.0.0.1:$port_up \
	--store "$(store 0)" --admin-listen 127.0.0.1:$admin_a >"$work/base.log" 2>&1 & pids+=($!)
pa=$!
"$work/idem-tree" serve --listen 127.0.0.1:$port_b --upstream http://127.0.0.1:$port_up \
	--store "$(store 1)" --admin-listen 127.0.0.1:$admin_b >"$work/tree.log" 2>&1 & pids+=($!)
pb=$!
for port in $port_a $port_b; do
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# run PID PORT: "req/s CPU-µs-per-request" of one slice.
run() {
	local t0 t1 out rps
	t0=$(ticks "$1")
	out=$(bin/loadgen -url "http://127.0.0.1:$2" -scenario "$scenario" -duration "$slice")
	t1=$(ticks "$1")
	rps=$(sed -E 's/.*: ([0-9]+) req\/s.*/\1/' <<<"$out")
	awk -v r="$rps" -v d="$((t1 - t0))" -v hz="$hz" -v s="${slice%s}" \
		'BEGIN { printf "%d %.1f\n", r, d / hz * 1e6 / (r * s) }'
}
run "$pa" "$port_a" >/dev/null # untimed: warm both
run "$pb" "$port_b" >/dev/null
echo "base $base vs the working tree, $scenario calls on $kind, $pairs pairs of $slice"
for i in $(seq "$pairs"); do
	if ((i % 2)); then a=$(run "$pa" "$port_a"); b=$(run "$pb" "$port_b"); else b=$(run "$pb" "$port_b"); a=$(run "$pa" "$port_a"); fi
	echo "$i $a $b"
done | awk '
	{ n++; ratio[n] = $4 / $2; dcpu[n] = $5 - $3
	  printf "pair %2d  base %6d req/s %6.1f µs  tree %6d req/s %6.1f µs  tree/base %.3fx  CPU %+.1f µs\n", $1, $2, $3, $4, $5, ratio[n], dcpu[n]
	  if (ratio[n] > 1) faster++ }
	function median(a, k,   m) { asort(a); m = int((k + 1) / 2); return (k % 2) ? a[m] : (a[m] + a[m + 1]) / 2 }
	END { printf "tree/base: %.3fx median of %d pairs (%d faster); CPU per request %+.1f µs median\n", median(ratio, n), n, faster, median(dcpu, n) }'
