#!/usr/bin/env bash
# Installs the Node peers at the versions package-lock.json pins. Installs
# Node itself from Debian when it is missing. Idempotent: a second run with
# an up-to-date node_modules does nothing.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "peers: installing Node.js and npm from Debian" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "peers: Node.js $(node --version) is too old; the peers need 20 or newer" >&2
  exit 1
fi
# npm writes node_modules/.package-lock.json last: newer than the lock
# file means this lock file is installed.
if [ node_modules/.package-lock.json -nt package-lock.json ]; then
  exit 0
fi
# --ignore-scripts: the only install script is NestJS's donation banner.
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
