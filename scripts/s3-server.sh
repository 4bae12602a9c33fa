#!/usr/bin/env bash
# S3-compatible test server for store/s3: versitygw (Apache-2.0), a real S3
# gateway over a directory that honours If-None-Match: * and If-Match on
# PutObject and If-Match on DeleteObject.
#
#   scripts/s3-server.sh install   build versitygw into the cache (once, ~2 min)
#                                  and print its path
#   scripts/s3-server.sh path      print the binary's path; exit 1 if missing
#   scripts/s3-server.sh start     install if missing, start it on a free
#                                  loopback port over a temp directory, and
#                                  print shell assignments to eval:
#                                    IDEM_TEST_S3=http://testkey:testsecret@127.0.0.1:PORT
#                                    IDEM_S3_SERVER_PID=... IDEM_S3_SERVER_DIR=...
#   scripts/s3-server.sh stop      stop the server that start started
#                                  (reads IDEM_S3_SERVER_PID and _DIR)
#
# The Go tests of store/s3 need only `install`: when IDEM_TEST_S3 is unset
# they start (and always stop) a versitygw of their own from the cache, from
# $(go env GOPATH)/bin or from PATH. `start` is for running other tools, or
# the tests, against one long-lived server:
#
#   eval "$(scripts/s3-server.sh start)"
#   IDEM_TEST_S3=$IDEM_TEST_S3 go test ./store/s3/...
#   scripts/s3-server.sh stop
#
# The cache is ${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}/bin,
# the same directory the tests look in.
set -euo pipefail

VERSION=v1.8.0
CACHE=${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}
BIN=$CACHE/bin/versitygw
STAMP=$CACHE/bin/versitygw.version
ACCESS_KEY=${IDEM_S3_ACCESS_KEY:-testkey}
SECRET_KEY=${IDEM_S3_SECRET_KEY:-testsecret}

log() { echo "s3-server: $*" >&2; }

installed() { [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$VERSION" ]]; }

install() {
	if installed; then
		echo "$BIN"
		return
	fi
	log "building versitygw $VERSION into $CACHE/bin (about 2 minutes)"
	mkdir -p "$CACHE/bin"
	# Outside any module, so the project's go.mod is left alone.
	(cd "$CACHE" && GOBIN=$CACHE/bin GOFLAGS= go install "github.com/versity/versitygw/cmd/versitygw@$VERSION")
	echo "$VERSION" >"$STAMP"
	echo "$BIN"
}

free_port() {
	# Port 0 lets the kernel pick; the tiny window before versitygw binds
	# it again is covered by the retry in start.
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

start() {
	install >/dev/null
	local dir port pid
	dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-s3.XXXXXX")
	mkdir -p "$dir/root"
	for _ in 1 2 3; do
		port=$(free_port)
		ROOT_ACCESS_KEY=$ACCESS_KEY ROOT_SECRET_KEY=$SECRET_KEY \
			setsid "$BIN" --port "127.0.0.1:$port" -q posix "$dir/root" >"$dir/log" 2>&1 </dev/null &
		pid=$!
		for _ in $(seq 100); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
				echo "IDEM_TEST_S3=http://$ACCESS_KEY:$SECRET_KEY@127.0.0.1:$port"
				echo "IDEM_S3_SERVER_PID=$pid"
				echo "IDEM_S3_SERVER_DIR=$dir"
				echo "export IDEM_TEST_S3 IDEM_S3_SERVER_PID IDEM_S3_SERVER_DIR"
				log "versitygw pid $pid on 127.0.0.1:$port over $dir/root"
				return
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		log "versitygw did not come up on port $port; retrying"
	done
	log "versitygw failed to start; its log:"
	cat "$dir/log" >&2
	rm -rf "$dir"
	exit 1
}

stop() {
	local pid=${IDEM_S3_SERVER_PID:-} dir=${IDEM_S3_SERVER_DIR:-}
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 30); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	# Only a directory that start made.
	if [[ -n $dir && $dir == */idem-s3.* && -d $dir ]]; then
		rm -rf "$dir"
	fi
}

case ${1:-} in
install) install ;;
path)
	installed || {
		log "versitygw $VERSION is not installed; run $0 install"
		exit 1
	}
	echo "$BIN"
	;;
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 install|path|start|stop" >&2
	exit 2
	;;
esac
