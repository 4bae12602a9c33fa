#!/usr/bin/env bash
# Checks the package as npm would publish it: packs it (prepack builds
# dist/), checks the tarball's files and package.json, installs the tarball
# into a scratch project in a temporary directory, imports it by name from
# both entry points (and ./file under the browser and react-native
# conditions, where it must fail clearly), and type-checks a small consumer
# (test/consumer) with tsc --strict under Node without DOM and under a
# browser configuration, without skipLibCheck. Needs node_modules (npm ci).
set -euo pipefail
pkg="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
fail() { echo "pack-check: $*" >&2; exit 1; }
cd "$pkg"
tsc="$pkg/node_modules/.bin/tsc"
[ -x "$tsc" ] || fail "$tsc is missing; run npm ci in $pkg"
cmp -s LICENSE ../../LICENSE || fail "clients/typescript/LICENSE differs from the repository's LICENSE; copy it again"

tarball="$scratch/$(npm pack --silent --pack-destination "$scratch" | tail -n 1)"
[ -f "$tarball" ] || fail "npm pack made no tarball"
files="$(tar -tzf "$tarball" | sed 's#^package/##' | sort)"
for f in package.json LICENSE README.md dist/index.js dist/index.d.ts dist/outbox-file.js dist/outbox-file.d.ts dist/outbox-file-unsupported.js dist/client.d.ts; do
  grep -qxF "$f" <<<"$files" || fail "the tarball lacks $f; it holds: $(tr '\n' ' ' <<<"$files")"
done
if grep -E '^(test|examples|scripts|node_modules|\.examples)/|tsconfig' <<<"$files"; then
  fail "the tarball holds files a user does not need (above)"
fi
tar -xzOf "$tarball" package/package.json | node --input-type=module -e '
  import assert from "node:assert/strict"
  const p = JSON.parse(await new Response(process.stdin).text())
  assert.equal(p.private, undefined, "private")
  assert.equal(p.license, "Apache-2.0")
  assert.ok(p.repository && p.repository.url, "repository")
  assert.deepEqual(p.publishConfig, { access: "public" })
  assert.deepEqual(Object.keys(p.dependencies ?? {}), [], "no runtime dependencies")
  for (const entry of [".", "./file"]) {
    const e = p.exports[entry]
    assert.deepEqual(Object.keys(e), ["types", "react-native", "browser", "node", "default"], entry)
  }
  assert.equal(p.exports["./file"].node, "./dist/outbox-file.js")
'

app="$scratch/app"
mkdir -p "$app"
cd "$app"
printf '{"name":"idem-client-consumer","private":true,"type":"module"}\n' > package.json
npm install --no-audit --no-fund --no-package-lock --loglevel=error "$tarball" >/dev/null
[ -z "$(ls node_modules | grep -v '^@idem-dev$' || true)" ] || fail "installing the tarball pulled in dependencies: $(ls node_modules)"
# The consumer's Node types: the package's own @types/node (a devDependency).
mkdir -p node_modules/@types
ln -s "$pkg/node_modules/@types/node" node_modules/@types/node
cp "$pkg"/test/consumer/* .

"$tsc" --strict -p tsconfig.node.json || fail "the consumer does not type-check under Node without DOM"
"$tsc" --strict -p tsconfig.browser.json || fail "the consumer does not type-check under the browser configuration"

out="$(node out/node.js)"
node --input-type=module -e '
  import assert from "node:assert/strict"
  const o = JSON.parse(process.argv[1])
  assert.equal(o.status, 201)
  assert.deepEqual(o.data, { url: "http://127.0.0.1:9/charges", method: "POST" })
  assert.deepEqual(o.outcomes, ["sent", "sent", "sent", "sent", "sent"])
  assert.equal(o.code, "conflict")
  assert.equal(o.refused, true)
' "$out" || fail "the consumer ran wrong: $out"

# By name, from both entry points, under each condition.
node --input-type=module -e '
  import assert from "node:assert/strict"
  const main = await import("@idem-dev/client")
  for (const name of ["IdemClient", "IdemError", "IdemResponse", "MemoryOutbox", "IndexedDBOutbox", "LocalStorageOutbox", "AsyncStorageOutbox"]) assert.equal(typeof main[name], "function", name)
  const { FileOutbox } = await import("@idem-dev/client/file")
  assert.deepEqual(await new FileOutbox(process.argv[1]).list(), [])
' "$scratch/outbox"
for cond in browser react-native; do
  node --conditions="$cond" --input-type=module -e '
    import assert from "node:assert/strict"
    const { IdemClient } = await import("@idem-dev/client")
    assert.equal(typeof IdemClient, "function")
    const { FileOutbox } = await import("@idem-dev/client/file")
    assert.throws(() => new FileOutbox("/tmp/x"), /needs Node\.js.*IndexedDBOutbox.*AsyncStorageOutbox/)
  ' || fail "@idem-dev/client/file under the $cond condition"
done
echo "pack-check: $(basename "$tarball") ($(wc -l <<<"$files") files): installs, imports by name (node, browser, react-native), type-checks under Node without DOM and under a browser configuration"
