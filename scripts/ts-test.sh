#!/usr/bin/env bash
# Runs the TypeScript client's tests (clients/typescript, node --test):
# installs what they need (scripts/ts-deps.sh), builds the gateway from this
# repository once for all of them, and runs them against it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/ts-deps.sh"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/idem" ./cmd/idem)
cd "$root/clients/typescript"
IDEM_BIN="$bin/idem" npm test --silent
