#!/usr/bin/env bash
# Profiles idem's gateway under the harness's load: starts the upstream and
# the gateway (cmd/gwprof: `idem serve`'s wiring plus net/http/pprof), sends
# one scenario for 20 s and takes a 10 s CPU profile in the middle.
#
#   bench/profile.sh [STORE_DSN] [SCENARIO]     # defaults: file:<tmp> first
#   go tool pprof -top bench/bin/gwprof /tmp/idem-profile/cpu.pprof
#
# PORT_BASE (default 18080) moves its ports (PORT_BASE to PORT_BASE+3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
out=${PROFILE_OUT:-/tmp/idem-profile}
rm -rf "$out" && mkdir -p "$out"
store=${1:-file:$out/idem-data}
scenario=${2:-first}
pb=${PORT_BASE:-18080}
up=127.0.0.1:$pb gw=127.0.0.1:$((pb + 1)) pp=127.0.0.1:$((pb + 3))
go build -mod=mod -o bin/ ./cmd/upstream ./cmd/gwprof ./cmd/loadgen

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
bin/upstream -listen $up >"$out/upstream.log" 2>&1 & pids+=($!)
bin/gwprof -listen $gw -upstream http://$up -store "$store" -pprof $pp >"$out/gateway.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -sf http://$gw/healthz >/dev/null && break; sleep 0.1; done
bin/loadgen -url http://$gw -scenario "$scenario" -duration 20s >"$out/load.txt" & load=$!
sleep 6
curl -sf "http://$pp/debug/pprof/goroutine?debug=1" -o "$out/goroutines-early.txt"
curl -sf "http://$pp/debug/pprof/profile?seconds=10" -o "$out/cpu.pprof"
curl -sf "http://$pp/debug/pprof/allocs" -o "$out/allocs.pprof"
# Where the gateway's goroutines wait, mid-load: counts per stack.
curl -sf "http://$pp/debug/pprof/goroutine?debug=1" -o "$out/goroutines.txt"
wait "$load"
cat "$out/load.txt"
go tool pprof -top -nodecount=40 bin/gwprof "$out/cpu.pprof" 2>/dev/null | head -50
echo "profiles in $out"
