// A process killed (SIGKILL) while it holds an entry's lock file, right
// after creating it: a new process takes the lock over and sends the entry.
// Where hard links fail, the lock is created and written in two steps, and
// the process is killed between them: the empty lock is taken over once its
// short grace has passed. An HTTP server on loopback counts what arrives.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { IdemClient } from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'
import { pkgRoot, until } from './harness.js'

let server, url
const perKey = new Map()
before(async () => {
  server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const key = req.headers['idempotency-key']
      perKey.set(key, (perKey.get(key) || 0) + 1)
      res.writeHead(201, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ key }))
    })
  })
  await new Promise(r => server.listen(0, '127.0.0.1', r))
  url = `http://127.0.0.1:${server.address().port}`
})
after(() => new Promise(r => { server.closeAllConnections(); server.close(r) }))

function app(args, env = {}) {
  const p = spawn(process.execPath, [join(pkgRoot, 'test/fixtures/outbox-app.js'), ...args], {
    stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env },
  })
  p.out = ''
  p.stdout.on('data', d => (p.out += d))
  p.done = new Promise(r => p.on('exit', (code, signal) => r({ code, signal })))
  return p
}

// within waits for a child to exit, and kills it (failing) if it does not
// within ms: the defect this guards against is a wait that never ends.
async function within(p, what, ms = 45000) {
  let timer
  const timeout = new Promise(r => (timer = setTimeout(() => r('timeout'), ms)))
  const r = await Promise.race([p.done, timeout])
  clearTimeout(timer)
  if (r === 'timeout') {
    p.kill('SIGKILL')
    await p.done
    assert.fail(`${what} did not finish in ${ms} ms; it printed: ${p.out}`)
  }
  return r
}

// stored leaves one entry in a new file outbox, as a request made while
// offline does, and returns the outbox's directory and the entry.
async function stored(key) {
  const dir = mkdtempSync(join(tmpdir(), 'idem-ts-lock-kill-'))
  const offline = new IdemClient({ baseURL: url, outbox: new FileOutbox(dir), fetch: async () => { throw new TypeError('offline') } })
  await offline.request('/lock', { method: 'POST', key, headers: { 'x-user-id': 'u' }, body: { n: 1 }, maxAttempts: 1 }).catch(() => {})
  const [entry] = await new FileOutbox(dir).list()
  assert.equal(entry.key, key)
  return { dir, entry }
}

async function killHolder(dir, entry, hooks) {
  const holder = app(['retry', url, dir], { IDEM_FILEOUTBOX_TEST: hooks })
  await until('the holder to stop after creating the lock', () => holder.out.includes('paused-after-lock'))
  holder.kill('SIGKILL')
  assert.equal((await holder.done).signal, 'SIGKILL')
  const lock = join(dir, entry.id + '.lock')
  assert.ok(existsSync(lock), 'the killed holder left its lock')
  return lock
}

test('killed between creating and writing its lock (no hard links): request() with the key sends it', async () => {
  const { dir, entry } = await stored('k-empty-lock')
  const lock = await killHolder(dir, entry, 'pause-after-lock,no-link')
  assert.equal(statSync(lock).size, 0, 'the lock was left empty')
  assert.equal(perKey.get('k-empty-lock'), undefined)

  const next = app(['request', url, dir, 'k-empty-lock', '{"n":1}'])
  assert.equal((await within(next, 'request() with the key of an empty lock')).code, 0)
  assert.deepEqual(JSON.parse(next.out), { status: 201 })
  assert.equal(perKey.get('k-empty-lock'), 1)
  assert.deepEqual(await new FileOutbox(dir).list(), [])
  assert.ok(!existsSync(lock))
})

test('killed right after creating its lock: the next retryPending takes it over and sends the entry', async () => {
  const { dir, entry } = await stored('k-dead-holder')
  const lock = await killHolder(dir, entry, 'pause-after-lock')
  assert.equal(perKey.get('k-dead-holder'), undefined)

  const next = app(['retry', url, dir])
  assert.equal((await within(next, 'retryPending after the holder was killed')).code, 0)
  const passes = next.out.trim().split('\n').map(l => JSON.parse(l))
  assert.deepEqual(passes.at(-1), ['sent'], `passes: ${next.out}`)
  assert.ok(passes.slice(0, -1).every(p => p[0] === 'busy'), `passes: ${next.out}`)
  assert.equal(perKey.get('k-dead-holder'), 1)
  assert.deepEqual(await new FileOutbox(dir).list(), [])
  assert.ok(!existsSync(lock))
})
