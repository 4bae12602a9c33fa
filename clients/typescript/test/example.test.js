// The TypeScript example (the mobile app's saveAnswer flow), type-checked
// against the package's declarations, compiled, and run against the
// gateway's mobile profile.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { stack, mobileRoutes, pkgRoot } from './harness.js'

let s
before(async () => {
  s = await stack({ profile: 'mobile', routes: mobileRoutes })
  s.proxy.mode = 'normal'
})
after(async () => { await s.close() })

test('examples/save-answer.ts compiles and does what the app needs', async () => {
  const out = join(pkgRoot, '.examples')
  execFileSync(join(pkgRoot, 'node_modules/.bin/tsc'), ['-p', join(pkgRoot, 'tsconfig.examples.json')], { stdio: 'inherit' })
  const { main } = await import(pathToFileURL(join(out, 'save-answer.js')).href)
  const origError = console.error
  console.error = () => {}
  let lines
  try {
    lines = await main(s.proxy.url)
  } finally {
    console.error = origError
  }
  assert.equal(lines.length, 3, lines.join('\n'))
  assert.match(lines[0], /^q1 saved as \d+$/)
  const [, a, b] = lines[1].match(/^q2 saved as (\d+), again as (\d+) \(replayed: true\)$/) || []
  assert.ok(a && a === b, lines[1])
  assert.equal(lines[2], 'q2 with another value under the same key: conflict 409 payload_mismatch')
  assert.equal(s.upstream.total(), 2)
})
