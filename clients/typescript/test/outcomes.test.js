// A Node app killed (SIGKILL) in the middle of a retryPending pass loses no
// outcome: each one the server gave was handed to the app (onOutcome) before
// its entry left the file outbox, or its entry is still there and the next
// pass fetches it again (replayed by the gateway). Against the gateway built
// from this repository, in front of a slow upstream.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { IdemClient } from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'
import { stack, mobileRoutes, pkgRoot, until } from './harness.js'

const N = 8
const USER = 'kim'
const SAVE = '/api/funnels/stress/assessments/a1/answers/save'
const body = i => JSON.stringify({ n: i })

let s
before(async () => { s = await stack({ profile: 'mobile', routes: mobileRoutes }) })
after(async () => { await s.close() })

function drain(dir, out) {
  const p = spawn(process.execPath, [join(pkgRoot, 'test/fixtures/outbox-app.js'), 'drain', s.proxy.url, dir, out], { stdio: ['ignore', 'inherit', 'inherit'] })
  p.done = new Promise(r => p.on('exit', (code, signal) => r({ code, signal })))
  return p
}

const handed = out => existsSync(out) ? readFileSync(out, 'utf8').trim().split('\n').filter(Boolean).map(l => JSON.parse(l)) : []
const ran = () => Array.from({ length: N }, (_, i) => s.upstream.count(USER, SAVE, body(i)))

test('SIGKILL mid-pass: every outcome the upstream produced was handed over or is still pending', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-ts-outcomes-'))
  const out = join(dir, '..', `${dir.split('/').pop()}.outcomes`)
  // N requests stored while the network is cut; each takes 300 ms upstream.
  s.proxy.mode = 'cut'
  const offline = new IdemClient({ baseURL: s.proxy.url, outbox: new FileOutbox(dir) })
  for (let i = 0; i < N; i++) {
    await offline.request(`${SAVE}?delay=300`, { method: 'POST', headers: { 'x-user-id': USER }, body: { n: i }, maxAttempts: 1 }).catch(() => {})
  }
  assert.equal((await new FileOutbox(dir).list()).length, N)
  s.proxy.mode = 'normal'

  const first = drain(dir, out)
  await until('half the entries to run upstream', () => ran().filter(c => c > 0).length >= N / 2)
  first.kill('SIGKILL')
  assert.equal((await first.done).signal, 'SIGKILL')

  const pending = new Set((await new FileOutbox(dir).list()).map(e => JSON.parse(e.body).n))
  const got = new Set(handed(out).map(o => o.n))
  const counts = ran()
  assert.ok(pending.size < N, 'the pass was killed before it finished any entry')
  for (let i = 0; i < N; i++) {
    if (counts[i] === 0) continue
    assert.ok(got.has(i) || pending.has(i), `request ${i} ran upstream, but its outcome was neither handed over nor kept: lost`)
  }

  // The restarted app finishes the outbox; every request has one outcome,
  // its own, and ran once.
  assert.equal((await drain(dir, out).done).code, 0)
  assert.deepEqual(await new FileOutbox(dir).list(), [])
  const byN = new Map()
  for (const o of handed(out)) {
    assert.equal(o.data.n, o.n, `request ${o.n} got another request's outcome`)
    if (byN.has(o.n)) assert.equal(o.data.id, byN.get(o.n).data.id, `request ${o.n} was handed two different outcomes`)
    byN.set(o.n, o)
  }
  assert.deepEqual([...byN.keys()].sort((a, b) => a - b), Array.from({ length: N }, (_, i) => i))
  assert.deepEqual(ran(), Array(N).fill(1))
})
