// A Node app killed with SIGKILL while it retries, restarted, sends its file
// outbox again: one execution per logical request, and each gets its own
// outcome.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FileOutbox } from '@idem-dev/client/file'
import { stack, mobileRoutes, pkgRoot, until } from './harness.js'

const N = 20
let s
before(async () => { s = await stack({ profile: 'mobile', routes: mobileRoutes }) })
after(async () => { await s.close() })

function app(...args) {
  const p = spawn(process.execPath, [join(pkgRoot, 'test/fixtures/app.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  p.out = ''
  p.stdout.on('data', d => (p.out += d))
  p.done = new Promise(r => p.on('exit', (code, signal) => r({ code, signal })))
  return p
}

const body = i => JSON.stringify({ n: i })
const path = i => `/api/funnels/stress/assessments/a1/${i % 2 ? 'complete' : 'answers/save'}`

test('SIGKILL mid-retry, restart, resume from the file outbox: one execution per request', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-ts-kill-'))
  const outbox = new FileOutbox(dir)
  // Every answer is lost after the upstream ran: the app retries and
  // retries, each replay lost too.
  s.proxy.mode = 'drop'
  const first = app('send', s.proxy.url, dir, String(N))
  await until('the first half to run upstream', () => {
    let ran = 0
    for (let i = 0; i < N / 2; i++) ran += s.upstream.count('u' + (i % 3), path(i), body(i))
    return ran >= N / 2
  })
  // Then the network goes: the second half never reaches the gateway.
  s.proxy.mode = 'cut'
  writeFileSync(dir + '.go', '')
  await until('all requests to be stored', async () => (await outbox.list()).length === N)
  await new Promise(r => setTimeout(r, 200)) // mid-retry
  first.kill('SIGKILL')
  assert.equal((await first.done).signal, 'SIGKILL')
  assert.equal(first.out, '', 'the killed app saw an outcome')
  const ranBefore = s.upstream.total()
  assert.equal(ranBefore, N / 2, 'executions before the restart')

  // The restarted app, on a network that still loses 30% of the answers and
  // cuts 10% of the requests.
  s.proxy.mode = 'faulty'
  const second = app('resume', s.proxy.url, dir)
  assert.equal((await second.done).code, 0)
  const outcomes = new Map()
  for (const line of second.out.trim().split('\n')) {
    const o = JSON.parse(line)
    assert.ok(!outcomes.has(o.n), `request ${o.n} reported twice`)
    outcomes.set(o.n, o)
  }
  for (let i = 0; i < N; i++) {
    const user = 'u' + (i % 3)
    assert.equal(s.upstream.count(user, path(i), body(i)), 1, `request ${i} ran ${s.upstream.count(user, path(i), body(i))} times`)
    const o = outcomes.get(i)
    assert.ok(o, `request ${i} got no outcome`)
    assert.equal(o.data.n, i)
    assert.equal(o.data.user, user)
    assert.equal(o.data.path, path(i))
  }
  assert.equal(s.upstream.total(), N)
  assert.equal((await outbox.list()).length, 0)
})
