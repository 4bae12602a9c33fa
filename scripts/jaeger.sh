#!/usr/bin/env bash
# Jaeger for the gateway's tracing test (cmd/idem TestTracingJaeger): a real
# OTLP receiver with a query API, built from the Go module proxy as a Go
# tool of the module in internal/tools/jaeger (its go.mod pins the version),
# into the cache.
#
#   scripts/jaeger.sh install   build Jaeger into the cache (once; several
#                               minutes on 2 cores) and print its path
#   scripts/jaeger.sh path      print the binary's path; exit 1 if missing
#
# The test starts (and always stops) a Jaeger of its own on free loopback
# ports; it looks for the binary in $IDEM_JAEGER, then the cache, then
# PATH. The cache is ${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}/bin,
# as for scripts/s3-server.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

MODDIR=internal/tools/jaeger
VERSION=$(awk '$1 == "github.com/jaegertracing/jaeger" { print $2 }' "$MODDIR/go.mod")
CACHE=${IDEM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}
BIN=$CACHE/bin/jaeger
STAMP=$CACHE/bin/jaeger.version

log() { echo "jaeger: $*" >&2; }

installed() { [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$VERSION" ]]; }

install() {
	if installed; then
		echo "$BIN"
		return
	fi
	log "building Jaeger $VERSION into $CACHE/bin (several minutes the first time)"
	mkdir -p "$CACHE/bin"
	# The tool module's own go.mod and go.sum: the project's stay untouched.
	GOFLAGS= go -C "$MODDIR" build -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
	mv "$BIN.tmp" "$BIN"
	echo "$VERSION" >"$STAMP"
	echo "$BIN"
}

case ${1:-} in
install) install ;;
path)
	installed || {
		log "Jaeger $VERSION is not installed; run $0 install"
		exit 1
	}
	echo "$BIN"
	;;
*)
	echo "usage: $0 install|path" >&2
	exit 2
	;;
esac
