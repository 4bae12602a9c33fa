#!/usr/bin/env bash
# A throwaway 3-node Redis Cluster (3 primaries, no replicas) on free
# loopback ports, for the gateway's redis-cluster:// tests and for trying
# the gateway on a cluster by hand.
#
#   eval "$(scripts/redis-cluster.sh start)"   starts it and prints shell assignments:
#       IDEM_TEST_REDIS_CLUSTER=redis-cluster://127.0.0.1:P1?addr=127.0.0.1:P2&addr=127.0.0.1:P3
#       IDEM_REDIS_CLUSTER_DIR=...  (the nodes' directory; stop reads it)
#   scripts/redis-cluster.sh stop              stops the nodes of $IDEM_REDIS_CLUSTER_DIR
#
# Needs redis-server and redis-cli (Debian: redis-server, redis-tools).
set -euo pipefail

log() { echo "redis-cluster: $*" >&2; }

# free_port prints a port that is free, and whose cluster bus port (the
# port + 10000, which every cluster node also listens on) is free and
# valid: a kernel-picked port above 55535 has no valid bus port.
free_port() {
	python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import random, socket
for _ in range(200):
    p = random.randint(20000, 45000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p)
    break
PY
}

up() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

start() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
		log "redis-server and redis-cli are required (apt-get install redis-server)"
		exit 1
	}
	local dir ports=() addrs=()
	dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-redis-cluster.XXXXXX")
	# A port picked free may be taken before the node binds it (other
	# tests pick ports too): a node that does not come up is started
	# again on another port.
	for i in 1 2 3; do
		local port ok=
		for _ in 1 2 3; do
			port=$(free_port)
			mkdir -p "$dir/$port"
			redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
				--dir "$dir/$port" --pidfile "$dir/$port/redis.pid" --logfile "$dir/$port/log" \
				--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 >/dev/null || true
			for _ in $(seq 200); do up "$port" && break; sleep 0.1; done
			if up "$port"; then
				ok=1
				break
			fi
			log "node on port $port did not start: $(tail -3 "$dir/$port/log" 2>/dev/null)"
			[[ -f $dir/$port/redis.pid ]] && kill "$(cat "$dir/$port/redis.pid")" 2>/dev/null || true
			rm -rf "${dir:?}/$port"
		done
		[[ -n $ok ]] || { IDEM_REDIS_CLUSTER_DIR=$dir stop; exit 1; }
		ports+=("$port")
		addrs+=("127.0.0.1:$port")
	done
	if ! out=$(redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes 2>&1); then
		log "redis-cli --cluster create failed: $out"
		IDEM_REDIS_CLUSTER_DIR=$dir stop
		exit 1
	fi
	for p in "${ports[@]}"; do
		for _ in $(seq 200); do
			redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
			sleep 0.1
		done
		redis-cli -h 127.0.0.1 -p "$p" cluster info | grep -q 'cluster_state:ok' || {
			log "node $p: cluster_state is not ok"
			IDEM_REDIS_CLUSTER_DIR=$dir stop
			exit 1
		}
	done
	echo "IDEM_TEST_REDIS_CLUSTER='redis-cluster://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}'"
	echo "IDEM_REDIS_CLUSTER_DIR=$dir"
	echo "export IDEM_TEST_REDIS_CLUSTER IDEM_REDIS_CLUSTER_DIR"
	log "3 primaries on ${addrs[*]} in $dir"
}

stop() {
	local dir=${IDEM_REDIS_CLUSTER_DIR:-}
	[[ -n $dir && $dir == */idem-redis-cluster.* && -d $dir ]] || return 0
	for pidfile in "$dir"/*/redis.pid; do
		[[ -f $pidfile ]] || continue
		local pid
		pid=$(cat "$pidfile")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	rm -rf "$dir"
}

case ${1:-} in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
