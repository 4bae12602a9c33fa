// The client's API without a network (fetch is a fake that records what it
// was given): the method rule, errors as IdemErrors, fetch's options and
// bodies carried through the outbox, and a retryPending pass that tells a
// lost answer from a network that is down.
import { test, describe, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { IdemClient, IdemError, IdemResponse, MemoryOutbox } from '@idem-dev/client'

// A fake fetch: answers[i] for call i (an Error is thrown as a network
// failure; the last answer repeats). It reads each body as fetch would send it.
function fakeFetch(answers) {
  const calls = []
  const f = async (url, init) => {
    const bytes = init.body === undefined ? null : new Uint8Array(await new Response(init.body).arrayBuffer())
    calls.push({ url, init, bytes, headers: Object.fromEntries(new Headers(init.headers)) })
    const a = answers[Math.min(calls.length - 1, answers.length - 1)]
    if (a instanceof Error) throw a
    return new Response(a.body ?? '{}', { status: a.status ?? 200, headers: a.headers ?? { 'content-type': 'application/json' } })
  }
  f.calls = calls
  return f
}

const base = 'http://api.test'

describe('request: the method', () => {
  test('is required: no default, nothing stored or sent', async () => {
    const outbox = new MemoryOutbox()
    const f = fakeFetch([{ status: 200 }])
    const client = new IdemClient({ outbox, baseURL: base, fetch: f })
    await assert.rejects(client.request('/x', { body: '{}' }), err => err instanceof TypeError && /method/.test(err.message))
    await assert.rejects(client.request('/x'), TypeError)
    assert.equal(f.calls.length, 0)
    assert.deepEqual(await outbox.list(), [])
  })
  test('GET, HEAD and OPTIONS take no key', async () => {
    const f = fakeFetch([{ status: 200 }])
    const client = new IdemClient({ baseURL: base, fetch: f })
    for (const method of ['GET', 'head', 'OPTIONS']) {
      await assert.rejects(client.request('/x', { method, key: 'k' }), TypeError)
      await assert.rejects(client.request('/x', { method, headers: { 'Idempotency-Key': 'k' } }), TypeError)
    }
    assert.equal(f.calls.length, 0)
    const r = await client.request('/x', { method: 'GET' })
    assert.equal(r.status, 200)
    assert.equal(r.key, '')
    assert.equal(f.calls[0].headers['idempotency-key'], undefined)
  })
  test('lower-case methods are sent upper-case, with a key', async () => {
    const f = fakeFetch([{ status: 200 }])
    await new IdemClient({ baseURL: base, fetch: f }).request('/x', { method: 'patch', body: '{}' })
    assert.equal(f.calls[0].init.method, 'PATCH')
    assert.ok(f.calls[0].headers['idempotency-key'])
  })
})

describe('request: failures are IdemErrors', () => {
  test('a network error on a GET is IdemError network, with fetch\'s error as cause', async () => {
    const cause = new TypeError('fetch failed')
    const client = new IdemClient({ baseURL: base, fetch: fakeFetch([cause]) })
    const err = await client.request('/x', { method: 'GET' }).then(() => null, e => e)
    assert.ok(err instanceof IdemError, `got ${err}`)
    assert.equal(err.code, 'network')
    assert.equal(err.cause, cause)
    assert.equal(err.pending, false)
  })
  test('an abort is IdemError aborted, on a GET and on a keyed request (which stays pending)', async () => {
    // fetch that never answers, and rejects on its signal as fetch does.
    const hang = (url, init) => new Promise((_, reject) => {
      if (init.signal.aborted) reject(init.signal.reason)
      init.signal.addEventListener('abort', () => reject(init.signal.reason))
    })
    const outbox = new MemoryOutbox()
    const client = new IdemClient({ outbox, baseURL: base, fetch: hang })
    for (const init of [{ method: 'GET' }, { method: 'POST', body: { a: 1 }, key: 'k-abort' }]) {
      const ac = new AbortController()
      const p = client.request('/x', { ...init, signal: ac.signal }).then(() => null, e => e)
      ac.abort()
      const err = await p
      assert.ok(err instanceof IdemError, `${init.method}: got ${err}`)
      assert.equal(err.code, 'aborted')
      assert.ok(err.cause, 'the signal\'s reason is the cause')
    }
    assert.deepEqual((await outbox.list()).map(e => e.key), ['k-abort'])
  })
})

describe('IdemError and IdemResponse are constructible', () => {
  test('new IdemError(code, message, fields)', () => {
    const cause = new Error('x')
    const e = new IdemError('conflict', 'the key ran', { key: 'k', status: 409, kind: 'payload_mismatch', cause })
    assert.equal(e.code, 'conflict')
    assert.equal(e.message, 'the key ran')
    assert.equal(e.key, 'k')
    assert.equal(e.status, 409)
    assert.equal(e.kind, 'payload_mismatch')
    assert.equal(e.cause, cause)
    assert.equal(e.name, 'IdemError')
    assert.ok(e instanceof Error)
    assert.equal(new IdemError('gave_up', 'm', { key: 'k' }).pending, true)
    assert.equal(new IdemError('network', 'm').pending, false)
  })
  test('a message where the code goes is refused, never taken for a code', () => {
    assert.throws(() => new IdemError('something went wrong'), TypeError)
    assert.throws(() => new IdemError('msg', 'text'), TypeError)
  })
  test('new IdemResponse(init)', () => {
    const r = new IdemResponse({ url: 'http://x/', status: 201, headers: new Headers({ 'idempotent-replayed': 'true' }), text: '{"a":1}' })
    assert.equal(r.ok, true)
    assert.equal(r.replayed, true)
    assert.deepEqual(r.json(), { a: 1 })
    assert.equal(r.key, '')
    assert.equal(r.attempts, 1)
  })
})

describe('fetch options and bodies reach fetch, from request() and from the outbox', () => {
  test('credentials, mode, redirect, keepalive, cache, referrerPolicy', async () => {
    const opts = { credentials: 'include', mode: 'cors', redirect: 'manual', keepalive: true, cache: 'no-store', referrerPolicy: 'no-referrer' }
    const outbox = new MemoryOutbox()
    const down = fakeFetch([{ status: 503 }])
    await new IdemClient({ outbox, baseURL: base, fetch: down }).request('/x', { method: 'POST', body: '{}', ...opts, maxAttempts: 1 }).catch(() => {})
    const f = fakeFetch([{ status: 200 }])
    const [r] = await new IdemClient({ outbox, fetch: f }).retryPending()
    assert.equal(r.status, 'sent')
    for (const call of [down.calls[0], f.calls[0]]) {
      for (const [k, v] of Object.entries(opts)) assert.equal(call.init[k], v, k)
    }
  })
  test('mode no-cors is refused: its opaque answer hides the outcome', async () => {
    const f = fakeFetch([{ status: 200 }])
    await assert.rejects(new IdemClient({ baseURL: base, fetch: f }).request('/x', { method: 'POST', body: '{}', mode: 'no-cors' }), TypeError)
    assert.equal(f.calls.length, 0)
  })
  test('bytes, Blob, FormData and URLSearchParams are sent as fetch would send them, the same after a restart', async () => {
    const form = new FormData()
    form.append('name', 'ada')
    form.append('file', new Blob(['hello'], { type: 'text/plain' }), 'h.txt')
    const cases = [
      ['Uint8Array', new Uint8Array([0, 1, 2, 250, 255]), null],
      ['ArrayBuffer', new Uint8Array([9, 8, 7, 6]).buffer, null],
      ['DataView', new DataView(new Uint8Array([5, 6, 7, 8, 9, 10]).buffer, 1, 3), null],
      ['Blob', new Blob(['{"b":1}'], { type: 'application/vnd.test+json' }), 'application/vnd.test+json'],
      ['FormData', form, /^multipart\/form-data; boundary=/],
      ['URLSearchParams', new URLSearchParams({ a: '1', b: 'x y' }), /^application\/x-www-form-urlencoded/],
      ['JSON', { a: [1, 'two'] }, 'application/json'],
    ]
    for (const [name, body, type] of cases) {
      // What fetch itself would send for this body.
      const want = new Response(body)
      const wantBytes = new Uint8Array(await want.arrayBuffer())
      const outbox = new MemoryOutbox()
      const down = fakeFetch([{ status: 503 }])
      await new IdemClient({ outbox, baseURL: base, fetch: down }).request('/x', { method: 'POST', body, maxAttempts: 1 }).catch(() => {})
      const f = fakeFetch([{ status: 200 }])
      const [r] = await new IdemClient({ outbox, fetch: f }).retryPending()
      assert.equal(r.status, 'sent', name)
      for (const call of [down.calls[0], f.calls[0]]) {
        // FormData's boundary is new each time it is read: its bytes are
        // compared between the attempts, and parsed below.
        const got = name === 'JSON' ? new TextEncoder().encode(JSON.stringify(body)) : name === 'FormData' ? down.calls[0].bytes : wantBytes
        assert.deepEqual(call.bytes, got, name)
        assert.equal(call.headers['content-type'], down.calls[0].headers['content-type'], name)
        const ct = call.headers['content-type']
        if (type === null) assert.equal(ct, undefined, name)
        else if (typeof type === 'string') assert.equal(ct, type, name)
        else assert.match(ct, type, name)
      }
      if (name === 'FormData') {
        // The boundary in Content-Type is the one in the stored bytes.
        const ct = f.calls[0].headers['content-type']
        const parsed = await new Response(f.calls[0].bytes, { headers: { 'content-type': ct } }).formData()
        assert.equal(parsed.get('name'), 'ada')
        assert.equal(await parsed.get('file').text(), 'hello')
      }
    }
  })
  test('values JSON would lose are refused before anything is stored', async () => {
    const outbox = new MemoryOutbox()
    const f = fakeFetch([{ status: 200 }])
    const client = new IdemClient({ outbox, baseURL: base, fetch: f })
    for (const body of [new Map([['a', 1]]), new Set([1]), () => 1, Promise.resolve(1), 10n]) {
      await assert.rejects(client.request('/x', { method: 'POST', body }), TypeError, String(body))
    }
    assert.equal(f.calls.length, 0)
    assert.deepEqual(await outbox.list(), [])
  })
})

describe('onOutcome: each outcome reaches the app before its entry leaves the outbox', () => {
  test('called per entry, awaited, while the entry is still stored; request() and retryPending alike', async () => {
    const outbox = new MemoryOutbox()
    await pending(3, outbox)
    const seen = []
    const onOutcome = async o => {
      // Still in the outbox while the app takes the outcome.
      seen.push([o.status, JSON.parse(o.entry.body).i, !!(await outbox.get(o.entry.id))])
      await new Promise(r => setTimeout(r, 5))
    }
    const f = fakeFetch([{ status: 201 }, { status: 422 }, { status: 201 }, { status: 201 }])
    const client = new IdemClient({ outbox, baseURL: base, fetch: f, concurrency: 1, onOutcome })
    const results = await client.retryPending()
    assert.deepEqual(results.map(r => r.status), ['sent', 'failed', 'sent'])
    assert.deepEqual(seen, [['sent', 0, true], ['failed', 1, true], ['sent', 2, true]])
    await client.request('/x', { method: 'POST', body: { i: 9 } })
    assert.deepEqual(seen.at(-1), ['sent', 9, true])
    assert.deepEqual(await outbox.list(), [])
  })
  test('a handler that throws keeps the entry; the next pass brings the outcome again', async () => {
    const outbox = new MemoryOutbox()
    await pending(3, outbox)
    const f = fakeFetch([{ status: 201 }])
    const boom = new Error('the app could not store it')
    const err = await new IdemClient({ outbox, fetch: f, concurrency: 1 })
      .retryPending({ onOutcome: o => { if (JSON.parse(o.entry.body).i === 1) throw boom } }).then(() => null, e => e)
    assert.equal(err, boom)
    assert.equal(f.calls.length, 2, 'no entry is started after the handler failed')
    assert.deepEqual((await outbox.list()).map(e => JSON.parse(e.body).i).sort(), [1, 2])
    const again = []
    await new IdemClient({ outbox, fetch: f }).retryPending({ onOutcome: o => { again.push(JSON.parse(o.entry.body).i) } })
    assert.deepEqual(again.sort(), [1, 2])
    assert.deepEqual(await outbox.list(), [])

    const err2 = await new IdemClient({ outbox, baseURL: base, fetch: f, onOutcome: () => { throw boom } })
      .request('/x', { method: 'POST', body: { i: 7 } }).then(() => null, e => e)
    assert.equal(err2, boom)
    assert.equal((await outbox.list()).length, 1)
  })
})

// A browser's fetch error: a TypeError with no code anywhere.
const lost = () => new TypeError('Failed to fetch')
const refused = () => Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) })

// pending stores n entries (bodies {i}), oldest first, as a server down
// with 503 leaves them.
async function pending(n, outbox) {
  const t0 = Date.now() - 60_000
  for (let i = 0; i < n; i++) {
    await new IdemClient({ outbox, baseURL: base, fetch: fakeFetch([{ status: 503 }]), now: () => t0 + i })
      .request('/x', { method: 'POST', body: { i }, maxAttempts: 1 }).catch(() => {})
  }
}

describe('retryPending on a lossy network', () => {
  afterEach(() => { delete globalThis.navigator })

  test('a lost answer leaves its entry pending and the pass goes on', async () => {
    const outbox = new MemoryOutbox()
    await pending(6, outbox)
    // Calls 1 and 4 lose their answer, the rest are answered.
    const f = fakeFetch([lost(), { status: 200 }, { status: 200 }, lost(), { status: 200 }, { status: 200 }])
    const results = await new IdemClient({ outbox, fetch: f, concurrency: 1, backoff: () => 1 }).retryPending()
    assert.deepEqual(results.map(r => r.status), ['network', 'sent', 'sent', 'network', 'sent', 'sent'])
    assert.equal(f.calls.length, 6)
    const left = (await outbox.list()).map(e => JSON.parse(e.body).i).sort()
    assert.deepEqual(left, [0, 3], 'the entries whose answers were lost stay, the others leave')
    const e = results[0].error
    assert.ok(e instanceof IdemError && e.pending && e.cause instanceof TypeError)
  })
  test('three entries in a row without an answer end the pass as offline', async () => {
    const outbox = new MemoryOutbox()
    await pending(6, outbox)
    const f = fakeFetch([lost()])
    const results = await new IdemClient({ outbox, fetch: f, concurrency: 1 }).retryPending()
    assert.deepEqual(results.map(r => r.status), ['network', 'network', 'network', 'offline', 'offline', 'offline'])
    assert.equal(f.calls.length, 3)
    assert.equal((await outbox.list()).length, 6)
  })
  test('navigator.onLine false is offline at once', async () => {
    const outbox = new MemoryOutbox()
    await pending(3, outbox)
    Object.defineProperty(globalThis, 'navigator', { value: { onLine: false }, configurable: true, writable: true })
    const f = fakeFetch([{ status: 200 }])
    const results = await new IdemClient({ outbox, fetch: f }).retryPending()
    assert.deepEqual(results.map(r => r.status), ['offline', 'offline', 'offline'])
    assert.equal(f.calls.length, 0)
  })
  test('a refused connection is offline at once', async () => {
    const outbox = new MemoryOutbox()
    await pending(4, outbox)
    const f = fakeFetch([refused()])
    const results = await new IdemClient({ outbox, fetch: f, concurrency: 1 }).retryPending()
    assert.deepEqual(results.map(r => r.status), ['offline', 'offline', 'offline', 'offline'])
    assert.equal(f.calls.length, 1)
  })
})
