#!/usr/bin/env bash
# Runs the TypeScript client's tests (clients/typescript): installs what they
# need (scripts/ts-deps.sh: npm ci from the committed lock file, Debian's
# chromium), builds the gateway from this repository once for all of them,
# builds the package with tsc (npm test's pretest) and runs node --test
# against it, then packs the package and checks it as an npm user gets it
# (clients/typescript/scripts/pack-check.sh). Under CI=true a missing tool
# fails, never skips.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/ts-deps.sh"
for tool in node npm go; do
  command -v "$tool" >/dev/null || { echo "ts-test: $tool is missing" >&2; exit 1; }
done
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/idem" ./cmd/idem)
cd "$root/clients/typescript"
IDEM_BIN="$bin/idem" npm test --silent
./scripts/pack-check.sh
