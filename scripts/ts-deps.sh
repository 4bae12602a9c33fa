#!/usr/bin/env bash
# Installs what the TypeScript client's tests need when it is missing:
# node_modules from the committed package-lock.json (npm ci), and Debian's
# chromium for the browser test (never a downloaded browser: playwright-core
# drives /usr/bin/chromium). Idempotent; a second run does nothing.
set -euo pipefail
cd "$(dirname "$0")/../clients/typescript"

if ! command -v node >/dev/null; then
  echo "ts-deps: installing Node.js" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
# npm ci only when the lock file changed since the last install.
stamp=node_modules/.lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  echo "ts-deps: npm ci" >&2
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2
  cp package-lock.json "$stamp"
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "ts-deps: installing chromium" >&2
  if ! apt-get install -y -qq chromium >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  fi
fi
