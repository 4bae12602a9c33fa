#!/usr/bin/env bash
# Installs playwright-core for the admin page's browser test
# (cmd/idem/testdata/adminpage) from npm, once. playwright-core downloads no
# browser: the test drives Debian's /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/../cmd/idem/testdata/adminpage"
want=$(node -p 'require("./package.json").dependencies["playwright-core"]')
have=$(node -p 'try { require("./node_modules/playwright-core/package.json").version } catch { "" }' 2>/dev/null || true)
if [[ -n $have && $have == "$want" ]]; then
	exit 0
fi
echo "admin-ui-deps: installing playwright-core $want" >&2
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --silent >/dev/null
