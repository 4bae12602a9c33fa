#!/usr/bin/env bash
# DynamoDB-compatible test server for store/dynamodb: dynalite (npm, MIT),
# DynamoDB's HTTP API over an in-memory LevelDB, installed into the cache
# and listening on 127.0.0.1:8000.
#
#   scripts/dynalite.sh install   npm-install dynalite into the cache (once,
#                                 ~10 s) and print the path of its binary
#   scripts/dynalite.sh start     install if missing and start it unless a
#                                 server already answers on the port
#   scripts/dynalite.sh stop      stop the server that start started
#   scripts/dynalite.sh status    exit 0 when a server answers on the port
#   scripts/dynalite.sh run CMD   start it, run CMD, and stop it again (a
#                                 server already answering is used and left
#                                 running); make test runs its tests so
#
# Idempotent: start with a server up and stop with none are no-ops. The
# cache is ${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}/dynalite,
# as for scripts/s3-server.sh. The port is IDEM_DYNALITE_PORT (default
# 8000); the tests read IDEM_TEST_DYNAMODB (default http://127.0.0.1:8000).
#
# Tables are created and deleted at once (--createTableMs 0 and so on): the
# tests make a table per store. Items keep DynamoDB's 400 KB limit.
set -euo pipefail

VERSION=4.0.0
CACHE=${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}
DIR=$CACHE/dynalite
BIN=$DIR/node_modules/.bin/dynalite
STAMP=$DIR/dynalite.version
PORT=${IDEM_DYNALITE_PORT:-8000}
RUN=$CACHE/dynalite-$PORT

log() { echo "dynalite: $*" >&2; }

installed() { [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$VERSION" ]]; }

install() {
	if installed; then
		echo "$BIN"
		return
	fi
	command -v npm >/dev/null || { log "npm is missing: install Node.js and npm (apt-get install nodejs npm)"; exit 1; }
	log "installing dynalite $VERSION into $DIR"
	mkdir -p "$DIR"
	# A package.json of its own, so that npm never walks up into a project.
	[[ -f $DIR/package.json ]] || echo '{"name":"idem-dynalite","private":true}' >"$DIR/package.json"
	(cd "$DIR" && npm install --no-audit --no-fund --loglevel=error "dynalite@$VERSION" >&2)
	echo "$VERSION" >"$STAMP"
	echo "$BIN"
}

# answering: something accepts connections on the port.
answering() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

start() {
	install >/dev/null
	if answering; then
		log "a server already answers on 127.0.0.1:$PORT"
		return
	fi
	mkdir -p "$RUN"
	# The guard keeps a request aborted by its client from ending the server.
	setsid node --require "$(cd "$(dirname "$0")" && pwd)/dynalite-guard.cjs" "$DIR/node_modules/dynalite/cli.js" --host 127.0.0.1 --port "$PORT" \
		--createTableMs 0 --deleteTableMs 0 --updateTableMs 0 >"$RUN/log" 2>&1 </dev/null &
	echo $! >"$RUN/pid"
	for _ in $(seq 100); do
		if answering; then
			log "pid $(cat "$RUN/pid") on 127.0.0.1:$PORT"
			return
		fi
		if ! kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	log "dynalite did not come up; its log:"
	cat "$RUN/log" >&2 || true
	exit 1
}

stop() {
	[[ -f $RUN/pid ]] || return 0
	local pid
	pid=$(cat "$RUN/pid")
	if kill "$pid" 2>/dev/null; then
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$RUN/pid"
}

run() {
	if answering; then
		log "using the server already answering on 127.0.0.1:$PORT; left running (scripts/dynalite.sh stop stops it if start started it)"
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
status) answering ;;
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
