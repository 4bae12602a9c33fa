// The client against the real gateway, in every profile, through a proxy
// that loses 30% of the answers after the upstream ran and cuts 10% of the
// requests in flight: N logical requests, N executions, and every caller
// gets its own result.
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { IdemClient, IdemError, MemoryOutbox } from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'
import { stack, mobileRoutes, fastBackoff } from './harness.js'

const SAVE = '/api/funnels/stress/assessments/a1/answers/save'
const PROFILES = {
  mobile: { n: 60, routes: mobileRoutes },
  ietf: { n: 30 },
  stripe: { n: 30 },
  'workflow-admin': { n: 30 },
}

async function pool(n, limit, fn) {
  const out = new Array(n)
  let next = 0
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < n) {
      const i = next++
      out[i] = await fn(i)
    }
  }))
  return out
}

for (const [profile, { n, routes = '' }] of Object.entries(PROFILES)) {
  describe(`profile ${profile}`, () => {
    let s
    before(async () => { s = await stack({ profile, routes }) })
    after(async () => { await s.close() })

    test(`${n} logical requests through lost answers and cut requests run ${n} times`, async t => {
      const outbox = new MemoryOutbox()
      const client = new IdemClient({ baseURL: s.proxy.url, outbox, backoff: fastBackoff, maxRetryAfter: 300 })
      const users = ['alice', 'bob', 'carol']
      const results = await pool(n, 10, async i => {
        const user = users[i % users.length]
        const r = await client.request(SAVE, { method: 'POST', headers: { 'x-user-id': user }, body: { n: i, questionId: `q${i}`, answerValue: i % 5 } })
        return { i, user, r }
      })
      for (const { i, user, r } of results) {
        const data = r.json().data
        assert.equal(data.n, i, `request ${i} got another request's result`)
        assert.equal(data.user, user)
        const body = JSON.stringify({ n: i, questionId: `q${i}`, answerValue: i % 5 })
        assert.equal(s.upstream.count(user, SAVE, body), 1, `request ${i} ran ${s.upstream.count(user, SAVE, body)} times`)
      }
      assert.equal(s.upstream.total(), n)
      assert.deepEqual(await outbox.list(), [])
      const { stats } = s.proxy
      // The faults happened (the proxy's seeded dice, IDEM_FAULT_SEED).
      assert.ok(stats.dropped >= n * 0.1 && stats.cut >= 1, `faults: ${stats.dropped} dropped, ${stats.cut} cut of ${stats.requests}`)
      const replays = results.filter(x => x.r.replayed).length
      t.diagnostic(`${profile}: ${stats.requests} requests, ${stats.dropped} answers lost, ${stats.cut} cut, ${replays} outcomes replayed`)
    })

    test('in_progress is retried, conflicts are typed errors that cannot be mistaken for it', async () => {
      s.proxy.mode = 'normal'
      try {
        const client = new IdemClient({ baseURL: s.proxy.url, backoff: fastBackoff })
        const slow = SAVE + '?delay=600'
        const first = client.request(slow, { method: 'POST', key: 'slow-1', headers: { 'x-user-id': 'dave' }, body: { n: 'slow' } })
        while (s.upstream.count('dave', SAVE, JSON.stringify({ n: 'slow' })) === 0) await new Promise(r => setTimeout(r, 5))
        // Another device (its own outbox) sends the same key meanwhile.
        const other = new IdemClient({ baseURL: s.proxy.url, backoff: fastBackoff })
        const err = await other.request(slow, { method: 'POST', key: 'slow-1', headers: { 'x-user-id': 'dave' }, body: { n: 'slow' }, maxAttempts: 1 })
          .then(() => null, e => e)
        assert.ok(err instanceof IdemError, `got ${err}`)
        assert.equal(err.code, 'in_progress')
        assert.equal(err.kind, 'in_progress')
        assert.equal(err.status, 409)
        assert.equal(err.key, 'slow-1')
        assert.ok(err.pending)
        // The same request, waiting this time, gets the first one's outcome.
        const [a, b] = await Promise.all([first, other.request(slow, { method: 'POST', key: 'slow-1', headers: { 'x-user-id': 'dave' }, body: { n: 'slow' } })])
        assert.equal(a.json().data.id, b.json().data.id)
        assert.ok(b.replayed)

        const c = await client.request(SAVE, { method: 'POST', key: 'k-conflict', headers: { 'x-user-id': 'dave' }, body: { n: 'c1' } })
        assert.ok(c.ok)
        // The first answer tells until when its key is kept, as replays do,
        // in every profile.
        assert.ok(!c.replayed && c.keyExpiresAt instanceof Date, `first answer's keyExpiresAt: ${c.keyExpiresAt}`)
        assert.ok(c.keyExpiresAt.getTime() > Date.now(), `${c.keyExpiresAt} is past`)
        const again = await client.request(SAVE, { method: 'POST', key: 'k-conflict', headers: { 'x-user-id': 'dave' }, body: { n: 'c1' } })
        assert.ok(again.replayed)
        // The record's expiry is set as it is written, just after the moment
        // the first answer told (never later than the record): the same
        // second, or the next.
        const ahead = again.keyExpiresAt.getTime() - c.keyExpiresAt.getTime()
        assert.ok(ahead === 0 || ahead === 1000, `replay says ${again.keyExpiresAt}, the first answer ${c.keyExpiresAt}`)
        const conflict = await client.request(SAVE, { method: 'POST', key: 'k-conflict', headers: { 'x-user-id': 'dave' }, body: { n: 'c2' } }).then(() => null, e => e)
        assert.equal(conflict.code, 'conflict')
        assert.equal(conflict.kind, 'payload_mismatch')
        assert.equal(conflict.status, profile === 'mobile' || profile === 'workflow-admin' ? 409 : 422)
        assert.ok(conflict.mayHaveRun && !conflict.pending)
        assert.equal(s.upstream.count('dave', SAVE, JSON.stringify({ n: 'c2' })), 0)

        // The same key on another endpoint: a conflict where keys are bound
        // to their action (ietf, workflow-admin), a separate key where they
        // are scoped per endpoint (stripe, mobile).
        const other2 = await client.request(SAVE.replace('answers/save', 'complete'), { method: 'POST', key: 'k-conflict', headers: { 'x-user-id': 'dave' }, body: { n: 'c1' } }).then(r => r, e => e)
        if (profile === 'ietf' || profile === 'workflow-admin') {
          assert.equal(other2.code, 'conflict')
          assert.equal(other2.kind, 'key_reused')
        } else {
          assert.ok(other2.ok, `${other2}`)
        }

        // The API's own 409 is a final answer, not idem's in_progress.
        const own = await client.request(SAVE + '?status=409', { method: 'POST', headers: { 'x-user-id': 'dave' }, body: { n: 'own409' } }).then(() => null, e => e)
        assert.equal(own.code, 'failed')
        assert.equal(own.status, 409)
        assert.equal(own.body.data.n, 'own409')
        assert.equal(s.upstream.count('dave', SAVE, JSON.stringify({ n: 'own409' })), 1)
      } finally {
        s.proxy.mode = 'faulty'
      }
    })
  })
}

describe('retryPending', () => {
  let s
  before(async () => { s = await stack({ profile: 'mobile', routes: mobileRoutes }) })
  after(async () => { await s.close() })

  test('two clients (two processes\' worth) on one file outbox: one sender per entry', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-ts-outbox-'))
    // Store 20 requests while the network is down.
    s.proxy.mode = 'cut'
    const offline = new IdemClient({ baseURL: s.proxy.url, outbox: new FileOutbox(dir), backoff: fastBackoff })
    const errs = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      offline.request(SAVE, { method: 'POST', headers: { 'x-user-id': 'erin' }, body: { n: i }, maxAttempts: 2 }).then(() => null, e => e)))
    assert.ok(errs.every(e => e && e.code === 'gave_up' && e.pending), errs.map(e => e && e.code).join())
    assert.equal((await new FileOutbox(dir).list()).length, 20)

    // While offline (connections refused), retryPending stops at once
    // instead of backing off for each entry in turn.
    await s.proxy.down()
    let attempts = 0
    const down = await new IdemClient({ baseURL: s.proxy.url, outbox: new FileOutbox(dir), concurrency: 2, onAttempt: () => attempts++ }).retryPending()
    await s.proxy.up()
    assert.equal(down.length, 20)
    assert.ok(down.every(r => r.status === 'offline'), down.map(r => r.status).join())
    assert.ok(attempts <= 2, `${attempts} attempts while offline, want at most the concurrency (2)`)

    s.proxy.mode = 'normal'
    const before = new Map(s.proxy.stats.perKey)
    const a = new IdemClient({ baseURL: s.proxy.url, outbox: new FileOutbox(dir) })
    const b = new IdemClient({ baseURL: s.proxy.url, outbox: new FileOutbox(dir) })
    const all = (await Promise.all([a.retryPending(), b.retryPending(), a.retryPending()])).flat()
    const sent = all.filter(r => r.status === 'sent')
    assert.equal(sent.length, 20, all.map(r => r.status).join())
    for (const r of sent) {
      assert.equal(s.proxy.stats.perKey.get(r.entry.key) - before.get(r.entry.key), 1, 'an entry was sent by two senders')
      assert.equal(r.response.json().data.n, JSON.parse(r.entry.body).n)
    }
    for (let i = 0; i < 20; i++) assert.equal(s.upstream.count('erin', SAVE, JSON.stringify({ n: i })), 1)
    assert.equal((await new FileOutbox(dir).list()).length, 0)
  })
})
