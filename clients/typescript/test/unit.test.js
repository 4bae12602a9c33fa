// The client's own logic, without a network: error shapes, classification,
// Retry-After, and the outbox adapters' contract.
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  problemKind, classify, retryAfterMs, IdemClient, MemoryOutbox, LocalStorageOutbox, AsyncStorageOutbox, entryId,
} from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'

const json = (h = 'application/json') => new Headers({ 'content-type': h })

describe('problemKind reads every profile\'s shape', () => {
  test('problem+json (ietf, stripe, workflow-admin)', () => {
    const h = json('application/problem+json')
    assert.equal(problemKind(h, JSON.stringify({ type: 'https://github.com/idem-dev/idem/blob/main/docs/problems.md#in_progress', status: 409, conflict_type: 'in_progress' })), 'in_progress')
    assert.equal(problemKind(h, JSON.stringify({ type: 'https://x/problems.md#payload_mismatch', status: 422 })), 'payload_mismatch')
    assert.equal(problemKind(h, JSON.stringify({ type: 'https://x/problems.md#missing_key', status: 400 })), 'missing_key')
    assert.equal(problemKind(h, JSON.stringify({ type: 'https://idem.example/problems/key_reused' })), 'key_reused')
    assert.equal(problemKind(h, JSON.stringify({ type: 'https://example.com/probs/out-of-credit' })), '')
  })
  test('the mobile app\'s shape', () => {
    const h = json()
    assert.equal(problemKind(h, JSON.stringify({ success: false, error: { code: 'DUPLICATE_OPERATION', details: { conflictType: 'key_reused' } } })), 'key_reused')
    assert.equal(problemKind(h, JSON.stringify({ success: false, error: { code: 'DUPLICATE_OPERATION', details: {} } })), 'payload_mismatch')
    assert.equal(problemKind(h, JSON.stringify({ success: false, error: { code: 'OPERATION_IN_PROGRESS' } })), 'in_progress')
    assert.equal(problemKind(h, JSON.stringify({ success: false, error: { code: 'VALIDATION_FAILED' } })), '')
  })
  test('Stripe\'s idempotency_error', () => {
    const h = json()
    assert.equal(problemKind(h, JSON.stringify({ error: { type: 'idempotency_error', message: 'There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): k. Please try again later.' } })), 'in_progress')
    assert.equal(problemKind(h, JSON.stringify({ error: { type: 'idempotency_error', message: 'Keys for idempotent requests can only be used with the same parameters they were first used with.' } })), 'payload_mismatch')
    assert.equal(problemKind(h, JSON.stringify({ error: { type: 'card_error', code: 'card_declined' } })), '')
  })
  test('not JSON, or not a problem', () => {
    assert.equal(problemKind(new Headers({ 'content-type': 'text/html' }), '{"conflict_type":"in_progress"}'), '')
    assert.equal(problemKind(json(), 'not json'), '')
    assert.equal(problemKind(json(), '[1,2]'), '')
    assert.equal(problemKind(json(), '{"type":42}'), '')
  })
})

test('classify: replays are final, in_progress is retried, conflicts stop, the API\'s own 409 is final', () => {
  const h = (o = {}) => new Headers({ 'content-type': 'application/json', ...o })
  assert.deepEqual(classify(200, h(), '{}'), { verdict: 'final', kind: '' })
  assert.equal(classify(500, h({ 'idempotent-replayed': 'true' }), '{}').verdict, 'final') // Stripe keeps a 500
  assert.equal(classify(409, h({ 'x-idempotency-cached': 'true' }), '{}').verdict, 'final') // the mobile app keeps a 409
  assert.equal(classify(200, h(), '{"idempotency_replayed":true}').verdict, 'final')
  assert.equal(classify(409, h({ 'retry-after': '1' }), '{"error":{"code":"OPERATION_IN_PROGRESS"}}').verdict, 'running')
  assert.equal(classify(409, h({ 'retry-after': '1' }), 'busy').verdict, 'running')
  assert.equal(classify(409, h(), '{"success":false,"error":{"code":"DUPLICATE_OPERATION"}}').verdict, 'conflict')
  assert.equal(classify(422, h(), '{"conflict_type":"payload_mismatch"}').verdict, 'conflict')
  assert.equal(classify(409, h(), '{"conflict_type":"previous_failure"}').verdict, 'conflict')
  assert.equal(classify(409, h(), '{"conflict_type":"outcome_unknown"}').verdict, 'conflict')
  assert.equal(classify(409, h(), '{"success":true}').verdict, 'final')
  for (const s of [408, 429, 500, 502, 503, 504]) assert.equal(classify(s, h(), '').verdict, 'retry', String(s))
  for (const s of [400, 401, 404, 422, 501]) assert.equal(classify(s, h(), '{}').verdict, 'final', String(s))
})

test('retryAfterMs', () => {
  assert.equal(retryAfterMs('2'), 2000)
  assert.equal(retryAfterMs(''), 0)
  assert.equal(retryAfterMs('soon'), 0)
  const now = Date.parse('2026-01-01T00:00:00Z')
  assert.equal(retryAfterMs('Thu, 01 Jan 2026 00:00:03 GMT', now), 3000)
})

// A fake fetch: answers[i] for attempt i (an Error is a network failure).
function fakeFetch(answers) {
  const calls = []
  const f = async (url, init) => {
    calls.push({ url, init, headers: Object.fromEntries(new Headers(init.headers)) })
    const a = answers[Math.min(calls.length - 1, answers.length - 1)]
    if (a instanceof Error) throw a
    return new Response(a.body ?? '{}', { status: a.status ?? 200, headers: a.headers ?? { 'content-type': 'application/json' } })
  }
  f.calls = calls
  return f
}

describe('request', () => {
  test('one key for every attempt, same body; stored before the first byte', async () => {
    const outbox = new MemoryOutbox()
    let storedFirst = false
    const f = fakeFetch([new TypeError('fetch failed'), { status: 503 }, { status: 429, headers: { 'retry-after': '0' } }, { status: 201, body: '{"ok":1}' }])
    const client = new IdemClient({ outbox, backoff: () => 1, baseURL: 'http://api.test',
      fetch: async (...a) => { storedFirst ||= (await outbox.list()).length === 1; return f(...a) } })
    const r = await client.request('/charges', { method: 'POST', body: { amount: 1000 } })
    assert.ok(storedFirst)
    assert.equal(r.status, 201)
    assert.equal(f.calls.length, 4)
    assert.equal(new Set(f.calls.map(c => c.headers['idempotency-key'])).size, 1)
    assert.ok(f.calls.every(c => c.init.body === '{"amount":1000}'))
    assert.equal(r.key, f.calls[0].headers['idempotency-key'])
    assert.deepEqual(await outbox.list(), [])
  })
  test('gives up after maxAttempts with the key, and the entry stays', async () => {
    const outbox = new MemoryOutbox()
    const client = new IdemClient({ outbox, backoff: () => 1, baseURL: 'http://api.test', fetch: fakeFetch([{ status: 502 }]) })
    const err = await client.request('/x', { method: 'POST', body: '{}', key: 'k1', maxAttempts: 3 }).then(() => null, e => e)
    assert.equal(err.code, 'gave_up')
    assert.equal(err.key, 'k1')
    assert.equal(err.attempts, 3)
    assert.equal(err.status, 502)
    assert.ok(err.pending)
    assert.equal((await outbox.list()).length, 1)
  })
  test('400 and 422 stop at once with a typed error; the entry leaves', async () => {
    for (const status of [400, 422]) {
      const outbox = new MemoryOutbox()
      const f = fakeFetch([{ status, body: '{"error":"bad"}' }])
      const client = new IdemClient({ outbox, baseURL: 'http://api.test', fetch: f })
      const err = await client.request('/x', { method: 'POST', body: '{}' }).then(() => null, e => e)
      assert.equal(err.code, 'failed')
      assert.equal(err.status, status)
      assert.equal(f.calls.length, 1)
      assert.deepEqual(await outbox.list(), [])
    }
  })
  test('gives up after 24 hours: an old entry is dropped unsent', async () => {
    let now = 0
    const f = fakeFetch([{ status: 200 }])
    const outbox = new MemoryOutbox()
    const client = new IdemClient({ outbox, baseURL: 'http://api.test', fetch: f, now: () => now })
    const stale = new IdemClient({ outbox, baseURL: 'http://api.test', fetch: fakeFetch([new TypeError('offline')]), now: () => now, backoff: () => 1 })
    await stale.request('/x', { method: 'POST', body: '{}', maxAttempts: 1 }).catch(() => {})
    now = 24 * 3600 * 1000 + 1
    const [r] = await client.retryPending()
    assert.equal(r.status, 'expired')
    assert.equal(f.calls.length, 0)
    assert.deepEqual(await outbox.list(), [])
  })
  test('credentials stay out of the outbox; authorize puts them back', async () => {
    const outbox = new MemoryOutbox()
    const down = new IdemClient({ outbox, baseURL: 'http://api.test', fetch: fakeFetch([new TypeError('offline')]) })
    await down.request('/x', { method: 'POST', body: '{}', headers: { authorization: 'Bearer secret', 'x-user-id': 'u1' }, maxAttempts: 1 }).catch(() => {})
    const [e] = await outbox.list()
    assert.ok(!JSON.stringify(e).includes('secret'))
    assert.ok(e.scope.length === 32)
    const f = fakeFetch([{ status: 200 }])
    const up = new IdemClient({ outbox, fetch: f, authorize: (h, entry) => { if (new Headers(entry.headers).get('x-user-id') === 'u1') h.set('authorization', 'Bearer secret') } })
    const [r] = await up.retryPending()
    assert.equal(r.status, 'sent')
    assert.equal(f.calls[0].headers.authorization, 'Bearer secret')
  })
  test('one key on two endpoints and for two users: four entries', async () => {
    const outbox = new MemoryOutbox()
    const client = new IdemClient({ outbox, baseURL: 'http://api.test', fetch: fakeFetch([new TypeError('offline')]) })
    for (const user of ['a', 'b']) {
      for (const path of ['/save', '/complete']) {
        await client.request(path, { method: 'POST', key: 'k', body: '{}', headers: { 'x-user-id': user }, maxAttempts: 1 }).catch(() => {})
      }
    }
    assert.equal((await outbox.list()).length, 4)
  })
  test('a body the outbox cannot store is refused before anything is sent', async () => {
    const client = new IdemClient({ baseURL: 'http://api.test', fetch: fakeFetch([{ status: 200 }]) })
    await assert.rejects(client.request('/x', { method: 'POST', body: new Map([['a', 1]]) }), TypeError)
  })
})

// The adapters' contract: put, get, delete, list, surviving a reopen.
async function contract(open) {
  const a = await open()
  const e1 = { key: 'k1', method: 'POST', url: 'http://x/1', scope: '', headers: [['x-user-id', 'u']], body: '{"n":1}', created: 1 }
  e1.id = await entryId(e1)
  const e2 = { ...e1, key: 'k2', created: 2 }
  e2.id = await entryId(e2)
  await a.put(e1)
  await a.put(e2)
  const b = await open() // another instance over the same storage: the restarted app
  assert.deepEqual((await b.list()).sort((x, y) => x.created - y.created), [e1, e2])
  assert.deepEqual(await b.get(e1.id), e1)
  await b.delete(e1.id)
  await b.delete(e1.id)
  assert.equal(await b.get(e1.id), undefined)
  assert.deepEqual(await (await open()).list(), [e2])
}

describe('outbox adapters', () => {
  test('MemoryOutbox', async () => {
    const m = new MemoryOutbox()
    await contract(() => m)
  })
  test('FileOutbox', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-ts-file-'))
    await contract(() => new FileOutbox(dir))
    assert.ok(readdirSync(dir).every(n => !n.startsWith('.tmp-')))
  })
  test('FileOutbox locks: one holder, taken over from a dead process', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-ts-lock-'))
    const a = new FileOutbox(dir)
    const b = new FileOutbox(dir)
    const t = await a.claim('e1')
    assert.ok(t)
    assert.equal(await b.claim('e1'), null)
    await a.release('e1', t)
    const t2 = await b.claim('e1')
    assert.ok(t2)
    await b.release('e1', t2)
    writeFileSync(join(dir, 'e2.lock'), JSON.stringify({ pid: 2 ** 22 + 12345, at: Date.now(), token: 'dead' }))
    assert.ok(await a.claim('e2'), 'a lock of a dead process was not taken over')
    assert.ok(JSON.parse(readFileSync(join(dir, 'e2.lock'), 'utf8')).pid === process.pid)
  })
  test('LocalStorageOutbox over a Storage', async () => {
    // Node 20 has no localStorage; this is the Web Storage interface over a Map.
    const m = new Map()
    const storage = {
      get length() { return m.size },
      key: i => [...m.keys()][i] ?? null,
      getItem: k => (m.has(k) ? m.get(k) : null),
      setItem: (k, v) => m.set(k, String(v)),
      removeItem: k => m.delete(k),
    }
    storage.setItem('unrelated', 'x')
    await contract(() => new LocalStorageOutbox(storage))
    assert.equal(storage.getItem('unrelated'), 'x')
  })
  test('AsyncStorageOutbox over an AsyncStorage-shaped store', async () => {
    const m = new Map()
    const asyncStorage = {
      getItem: async k => (m.has(k) ? m.get(k) : null),
      setItem: async (k, v) => void m.set(k, v),
      removeItem: async k => void m.delete(k),
      getAllKeys: async () => [...m.keys()],
      multiGet: async keys => keys.map(k => [k, m.get(k) ?? null]),
    }
    await contract(() => new AsyncStorageOutbox(asyncStorage))
    delete asyncStorage.multiGet
    await contract(() => new AsyncStorageOutbox(asyncStorage))
  })
})
