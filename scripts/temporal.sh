#!/usr/bin/env bash
# Temporal development server for trigger/temporal's tests: the Temporal
# CLI's `server start-dev` (Temporal Server 1.29, in memory), built from the
# Go module proxy into the cache, listening on 127.0.0.1:7233.
#
#   scripts/temporal.sh install   build the CLI into the cache (once, ~4 min
#                                 on 2 cores) and print its path
#   scripts/temporal.sh start     install if missing and start the dev server
#                                 unless one already answers on the port;
#                                 waits until it reports SERVING
#   scripts/temporal.sh stop      stop the server that start started
#   scripts/temporal.sh status    exit 0 when a server answers on the port
#   scripts/temporal.sh run CMD…  run CMD with a server up: one that already
#                                 answers is used and left running (said so);
#                                 one started for CMD is stopped after it,
#                                 also when CMD fails or is interrupted.
#                                 Exits with CMD's status. `make test` runs
#                                 trigger/temporal's tests this way, so it
#                                 leaves no server behind.
#
# Idempotent: start with a server up and stop with none are no-ops. The
# cache is ${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}/bin, as
# for scripts/s3-server.sh. The port is IDEM_TEMPORAL_PORT (default 7233);
# the tests read IDEM_TEST_TEMPORAL (default 127.0.0.1:7233).
set -euo pipefail

VERSION=v1.5.1
CACHE=${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}
BIN=$CACHE/bin/temporal
STAMP=$CACHE/bin/temporal.version
PORT=${IDEM_TEMPORAL_PORT:-7233}
RUN=$CACHE/temporal-$PORT
ADDR=127.0.0.1:$PORT

log() { echo "temporal: $*" >&2; }

installed() { [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$VERSION" ]]; }

install() {
	if installed; then
		echo "$BIN"
		return
	fi
	log "building the Temporal CLI $VERSION into $CACHE/bin (about 4 minutes)"
	mkdir -p "$CACHE/bin"
	# Outside any module, so the project's go.mod is left alone.
	(cd "$CACHE" && GOBIN=$CACHE/bin GOFLAGS= go install "github.com/temporalio/cli/cmd/temporal@$VERSION")
	echo "$VERSION" >"$STAMP"
	echo "$BIN"
}

serving() {
	installed || return 1
	"$BIN" operator cluster health --address "$ADDR" 2>/dev/null | grep -q SERVING
}

start() {
	install >/dev/null
	if serving; then
		log "a server already answers on $ADDR"
		return
	fi
	mkdir -p "$RUN"
	setsid "$BIN" server start-dev --headless --ip 127.0.0.1 --port "$PORT" \
		--log-level error >"$RUN/log" 2>&1 </dev/null &
	echo $! >"$RUN/pid"
	for _ in $(seq 120); do
		if serving; then
			log "dev server pid $(cat "$RUN/pid") serving on $ADDR"
			return
		fi
		if ! kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
			break
		fi
		sleep 0.5
	done
	log "the dev server did not come up; its log:"
	cat "$RUN/log" >&2
	stop
	exit 1
}

stop() {
	local pid
	pid=$(cat "$RUN/pid" 2>/dev/null || true)
	# Only the process start started, and only while it is still ours.
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && grep -q "start-dev" "/proc/$pid/cmdline" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		log "stopped pid $pid"
	fi
	rm -f "$RUN/pid"
}

# run starts a server for "$@" unless one answers, and stops it after.
run() {
	if serving; then
		log "using the dev server already answering on $ADDR; left running (scripts/temporal.sh stop stops it if start started it)"
		"$@"
		return
	fi
	start
	trap stop EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	"$@"
}

case ${1:-} in
install) install ;;
start) start ;;
stop) stop ;;
status) serving ;;
run)
	shift
	[[ $# -gt 0 ]] || { echo "usage: $0 run COMMAND [ARG...]" >&2; exit 2; }
	run "$@"
	;;
*)
	echo "usage: $0 install|start|stop|status|run COMMAND..." >&2
	exit 2
	;;
esac
