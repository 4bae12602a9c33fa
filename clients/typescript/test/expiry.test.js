// The key's expiry a server announces (Idempotency-Key-Expires, an HTTP-date,
// on first answers, replays and 409 answers; key_expires_at, RFC 3339, in problem+json
// bodies), against a local HTTP server that sends it: the client exposes it,
// and stops sending a key once the server no longer keeps it, since a new
// attempt could then run the request again.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { IdemClient, IdemError, MemoryOutbox } from '@idem-dev/client'

// The server's clock is its own (years ahead of the client's): the client
// must judge the expiry from the answer's Date, not by comparing clocks.
const SERVER_NOW = Date.parse('2031-03-01T12:00:00Z')
const EXPIRES = SERVER_NOW + 600_000 // the server keeps keys 10 minutes

let server, url
let handler = () => {}
const seen = []
before(async () => {
  server = http.createServer((req, res) => {
    let body = ''
    req.on('data', c => (body += c))
    req.on('end', () => {
      seen.push({ path: req.url, key: req.headers['idempotency-key'], body })
      res.sendDate = false
      res.setHeader('date', new Date(SERVER_NOW).toUTCString())
      handler(req, res, body)
    })
  })
  await new Promise(r => server.listen(0, '127.0.0.1', r))
  url = `http://127.0.0.1:${server.address().port}`
})
after(() => new Promise(r => { server.closeAllConnections(); server.close(r) }))

const count = path => seen.filter(s => s.path === path).length

function inProgress(res) {
  res.writeHead(409, {
    'content-type': 'application/problem+json',
    'retry-after': '0',
    'idempotency-key-expires': new Date(EXPIRES).toUTCString(),
  })
  res.end(JSON.stringify({ type: 'https://github.com/idem-dev/idem/blob/main/docs/problems.md#in_progress', status: 409, conflict_type: 'in_progress', key_expires_at: new Date(EXPIRES).toISOString() }))
}

test('a replay says until when its key is kept: IdemResponse.keyExpiresAt', async () => {
  const done = new Map()
  handler = (req, res) => {
    const key = req.headers['idempotency-key']
    const replay = done.has(key)
    done.set(key, true)
    res.writeHead(201, {
      'content-type': 'application/json',
      ...(replay ? { 'idempotent-replayed': 'true', 'idempotency-key-expires': new Date(EXPIRES).toUTCString() } : {}),
    })
    res.end('{"id":"1"}')
  }
  const client = new IdemClient({ baseURL: url })
  const first = await client.request('/replay', { method: 'POST', key: 'k-replay', body: { a: 1 } })
  assert.equal(first.keyExpiresAt, undefined)
  const again = await client.request('/replay', { method: 'POST', key: 'k-replay', body: { a: 1 } })
  assert.equal(again.replayed, true)
  assert.ok(again.keyExpiresAt instanceof Date)
  assert.equal(again.keyExpiresAt.getTime(), EXPIRES)
})

test('a 409 problem\'s key_expires_at (RFC 3339) reaches IdemError.keyExpiresAt', async () => {
  handler = (req, res) => {
    res.writeHead(409, { 'content-type': 'application/problem+json' })
    res.end(JSON.stringify({ type: 'https://github.com/idem-dev/idem/blob/main/docs/problems.md#outcome_unknown', status: 409, conflict_type: 'outcome_unknown', key_expires_at: '2031-03-01T14:10:00.5+02:00' }))
  }
  const err = await new IdemClient({ baseURL: url }).request('/conflict', { method: 'POST', key: 'k-c', body: {} }).then(() => null, e => e)
  assert.ok(err instanceof IdemError)
  assert.equal(err.code, 'conflict')
  assert.equal(err.keyExpiresAt.getTime(), Date.parse('2031-03-01T12:10:00.500Z'))
})

test('retryPending drops an entry whose key the server no longer keeps, unsent, as expired', async () => {
  handler = (req, res) => inProgress(res)
  const outbox = new MemoryOutbox()
  const t0 = Date.now()
  const err = await new IdemClient({ baseURL: url, outbox, now: () => t0 })
    .request('/running', { method: 'POST', key: 'k-run', body: { n: 1 }, maxAttempts: 1 }).then(() => null, e => e)
  assert.equal(err.code, 'in_progress')
  assert.equal(err.keyExpiresAt.getTime(), EXPIRES)
  assert.equal(count('/running'), 1)

  // Five minutes later on the client's clock: the key is still kept, so the
  // entry is sent again.
  const halfway = await new IdemClient({ outbox, now: () => t0 + 300_000, pendingAttempts: 1 }).retryPending()
  assert.deepEqual(halfway.map(r => r.status), ['in_progress'])
  assert.equal(count('/running'), 2)

  // Nine minutes and five seconds later: within the one-minute margin of
  // the expiry the server announced (ten minutes after its Date).
  const outcomes = []
  const late = await new IdemClient({ outbox, now: () => t0 + 545_000 }).retryPending({ onOutcome: o => { outcomes.push(o) } })
  assert.deepEqual(late.map(r => r.status), ['expired'])
  assert.equal(late[0].error.keyExpiresAt.getTime(), EXPIRES)
  assert.equal(count('/running'), 2, 'an entry past its key\'s expiry was sent')
  assert.deepEqual(outcomes.map(o => [o.status, o.entry.key]), [['expired', 'k-run']])
  assert.deepEqual(await outbox.list(), [])
})

test('request() stops retrying when the key\'s expiry comes while the first request still runs', async () => {
  let now = Date.now()
  // Each in_progress answer moves the client's clock 200 s on.
  handler = (req, res) => {
    now += 200_000
    inProgress(res)
  }
  const outbox = new MemoryOutbox()
  const err = await new IdemClient({ baseURL: url, outbox, now: () => now, backoff: () => 1 })
    .request('/long', { method: 'POST', key: 'k-long', body: {} }).then(() => null, e => e)
  assert.ok(err instanceof IdemError)
  assert.equal(err.code, 'expired')
  assert.equal(err.keyExpiresAt.getTime(), EXPIRES)
  // The first answer arrives at 200 s on the client's clock and gives the
  // key 600 s from then: sent at 0, 200, 400 and 600 s; at 800 s the key is
  // gone (from 740 s on it is within the margin).
  assert.equal(count('/long'), 4)
  assert.deepEqual(await outbox.list(), [])
})
