#!/usr/bin/env bash
# Installs what `make test` needs beyond the Go toolchain and the services
# (scripts/services.sh): idempotent, and cached so that the second run costs
# a few checks. `make test` runs it first, so that the README's test command
# passes on a fresh machine by itself; .ci/run runs the same.
#
# Each helper area adds its line below. Debian packages come from apt,
# Go tools from the module proxy (cached by scripts/s3-server.sh and the
# like), npm packages into the test directory that uses them.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "test-deps: $*" >&2; }

# apt_need PKG CMD: install Debian package PKG unless CMD is on PATH.
# apt-get update runs once per call of this script, and only when needed.
updated=
apt_need() {
	local pkg=$1 cmd=$2
	command -v "$cmd" >/dev/null && return 0
	if ! command -v apt-get >/dev/null; then
		log "$cmd is missing and this is not a Debian system: install $pkg"
		return 1
	fi
	log "installing $pkg (for $cmd)"
	if [[ -z $updated ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
}

# PostgreSQL and Redis, started when they are not running.
./scripts/services.sh
# store/s3: versitygw, built once into the cache (~2 min the first time).
./scripts/s3-server.sh install >/dev/null
# deploy/: promtool tests the alert rules; systemd-analyze checks the unit.
apt_need prometheus promtool
apt_need systemd systemd-analyze
# cmd/idem: the cleanup progress test drives a real terminal.
apt_need tmux tmux
# internal/gateway/admin: the admin page's browser test (headless Chromium
# driven by playwright-core; never a downloaded browser).
apt_need chromium chromium
apt_need nodejs node
apt_need npm npm
./scripts/admin-ui-deps.sh
# clients/typescript: node_modules (npm ci) and chromium for its browser test.
./scripts/ts-deps.sh
# store/dynamodb: dynalite (npm) in the cache. `make test` starts it on
# 127.0.0.1:8000 around the tests and stops it after (scripts/dynalite.sh
# run), unless a server already answers there.
./scripts/dynalite.sh install >/dev/null
# cmd/idem: the tracing test's OTLP receiver, Jaeger, built once into the
# cache from internal/tools/jaeger (several minutes the first time).
./scripts/jaeger.sh install >/dev/null
# trigger/temporal: the Temporal CLI, built once into the cache (about 4
# minutes the first time). `make test` starts its dev server around the
# module's tests and stops it after (scripts/temporal.sh run).
./scripts/temporal.sh install >/dev/null
