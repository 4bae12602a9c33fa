// A page saves answers while the proxy loses their answers and then cuts
// the network, is reloaded mid-retry, and resends from IndexedDB: the
// upstream sees each answer once. Two tabs retry at once: one sender per
// entry (navigator.locks). Headless Debian chromium driven by
// playwright-core; no browser is downloaded.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, mkdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { stack, mobileRoutes, pkgRoot, until } from './harness.js'

const CHROMIUM = process.env.IDEM_CHROMIUM || '/usr/bin/chromium'
const SAVE = '/api/funnels/stress/assessments/a1/answers/save'
const USER = 'browser-user'
const body = (q, v) => JSON.stringify({ stepId: 's1', questionId: q, answerValue: v })

const missing = !existsSync(CHROMIUM)
if (missing && process.env.CI === 'true') {
  throw new Error(`${CHROMIUM} is missing; scripts/ts-deps.sh installs it`)
}

let s, ctx, userDataDir
before(async () => {
  if (missing) return
  const { chromium } = await import('playwright-core')
  s = await stack({ profile: 'mobile', routes: mobileRoutes })
  userDataDir = mkdtempSync(join(tmpdir(), 'idem-chromium-'))
  ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
})
after(async () => {
  if (ctx) await ctx.close()
  if (s) await s.close()
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true })
})

test('reload mid-retry, resend from IndexedDB, each answer runs once', { skip: missing && `${CHROMIUM} missing` }, async () => {
  const url = `${s.proxy.url}/static/test/browser/page.html`
  const page = ctx.pages()[0] || (await ctx.newPage())
  const errors = []
  page.on('pageerror', e => errors.push(e))
  await page.goto(url)
  await page.evaluate(() => window.startup)

  // Answers 1-5 reach the upstream, but their answers are lost.
  s.proxy.mode = 'drop'
  for (let i = 1; i <= 5; i++) await page.evaluate(([q, v]) => window.saveAnswer(q, v), [`q${i}`, i])
  await until('answers 1-5 to run upstream', () => [1, 2, 3, 4, 5].every(i => s.upstream.count(USER, SAVE, body(`q${i}`, i)) >= 1))
  // The network goes: answers 6-10 never reach the gateway.
  s.proxy.mode = 'cut'
  for (let i = 6; i <= 10; i++) await page.evaluate(([q, v]) => window.saveAnswer(q, v), [`q${i}`, i])
  await until('10 answers in IndexedDB', async () => (await page.evaluate(() => window.pendingCount())) === 10)
  await new Promise(r => setTimeout(r, 300)) // mid-retry

  await page.reload()
  const startup = await page.evaluate(() => window.startup)
  assert.ok(startup.length === 10 && startup.includes('offline'), `start-up while offline: ${startup}`)
  assert.equal(await page.evaluate(() => window.pendingCount()), 10)

  // The network is back; a second tab is open too, and both resend at once.
  s.proxy.mode = 'normal'
  const page2 = await ctx.newPage()
  await page2.goto(url + '?tab=tab%202')
  await page.evaluate(() => { window.attempts = [] })
  const [r1, r2] = await Promise.all([page.evaluate(() => window.retry()), page2.evaluate(() => window.retry())])
  const page2Startup = await page2.evaluate(() => window.startup)
  const statuses = [...r1, ...r2].map(r => r.status).concat(page2Startup)
  assert.equal(statuses.filter(x => x === 'sent').length, 10, `statuses ${statuses}`)
  // One sender per entry across the tabs (and page2's own start-up retry):
  // each key was sent by one tab, once. (Counted in the tabs: Chromium
  // itself may resend a request whose pooled connection the proxy closed.)
  const attempts = [...(await page.evaluate(() => window.attempts)), ...(await page2.evaluate(() => window.attempts))]
  assert.equal(attempts.length, 10, `attempts ${attempts}`)
  assert.equal(new Set(attempts).size, 10)
  for (let i = 1; i <= 10; i++) {
    assert.equal(s.upstream.count(USER, SAVE, body(`q${i}`, i)), 1, `answer ${i} ran ${s.upstream.count(USER, SAVE, body(`q${i}`, i))} times`)
  }
  assert.equal(s.upstream.total(), 10, JSON.stringify([...s.upstream.counts]))
  await until('the outbox to empty', async () => (await page.evaluate(() => window.pendingCount())) === 0)
  assert.deepEqual(errors, [])

  await page.evaluate(() => window.retry()) // refresh the status line
  mkdirSync(join(pkgRoot, 'test/artifacts'), { recursive: true })
  await page.screenshot({ path: join(pkgRoot, 'test/artifacts/browser-outbox.png'), fullPage: true })
})

test('LocalStorageOutbox over the browser\'s localStorage survives a reload', { skip: missing && `${CHROMIUM} missing` }, async () => {
  const page = await ctx.newPage()
  await page.goto(`${s.proxy.url}/static/test/browser/page.html?tab=ls`)
  await page.evaluate(async () => {
    const { LocalStorageOutbox, IdemClient } = await import('/static/dist/index.js')
    const client = new IdemClient({ outbox: new LocalStorageOutbox(), fetch: async () => { throw new TypeError('Failed to fetch') } })
    await client.request('/api/funnels/stress/assessments/a1/answers/save', { method: 'POST', key: 'ls-1', headers: { 'x-user-id': 'ls-user' }, body: { n: 'ls' }, maxAttempts: 1 }).catch(() => {})
  })
  await page.reload()
  s.proxy.mode = 'normal'
  const statuses = await page.evaluate(async () => {
    const { LocalStorageOutbox, IdemClient } = await import('/static/dist/index.js')
    const outbox = new LocalStorageOutbox()
    const before = (await outbox.list()).map(e => e.key)
    const results = await new IdemClient({ outbox }).retryPending()
    return { before, results: results.map(r => [r.status, r.response && r.response.json().data.n]), after: (await outbox.list()).length }
  })
  assert.deepEqual(statuses, { before: ['ls-1'], results: [['sent', 'ls']], after: 0 })
  assert.equal(s.upstream.count('ls-user', SAVE, JSON.stringify({ n: 'ls' })), 1)
  await page.close()
})

test('a lost answer in the browser (Failed to fetch) leaves its entry pending, and the pass goes on', { skip: missing && `${CHROMIUM} missing` }, async () => {
  const page = await ctx.newPage()
  await page.goto(`${s.proxy.url}/static/test/browser/page.html?tab=lossy`)
  const USER2 = 'lossy-user'
  // Six requests stored while the network is cut.
  s.proxy.mode = 'cut'
  await page.evaluate(async () => {
    const { IdemClient, MemoryOutbox } = await import('/static/dist/index.js')
    window.lossy = { outbox: new MemoryOutbox() }
    const client = new IdemClient({ outbox: window.lossy.outbox })
    for (let i = 0; i < 6; i++) {
      await client.request('/api/funnels/stress/assessments/a1/answers/save', { method: 'POST', headers: { 'x-user-id': 'lossy-user' }, body: { n: `lossy-${i}` }, maxAttempts: 1 }).catch(() => {})
    }
  })
  // The network is back, but the answers to two of them are lost after
  // the upstream ran: Chromium says only "Failed to fetch".
  s.proxy.mode = 'normal'
  const lose = new Set(['lossy-1', 'lossy-4'])
  s.proxy.dropIf = (req, b) => { try { return lose.has(JSON.parse(b).n) } catch { return false } }
  const pass = async () => page.evaluate(async () => {
    const { IdemClient } = await import('/static/dist/index.js')
    const client = new IdemClient({ outbox: window.lossy.outbox, concurrency: 1 })
    const results = await client.retryPending()
    return results.map(r => [JSON.parse(r.entry.body).n, r.status, r.error ? String(r.error.cause) : '', r.response ? r.response.replayed : null])
  })
  try {
    const first = await pass()
    assert.deepEqual(first.map(([n, status]) => [n, status]), [
      ['lossy-0', 'sent'], ['lossy-1', 'network'], ['lossy-2', 'sent'], ['lossy-3', 'sent'], ['lossy-4', 'network'], ['lossy-5', 'sent'],
    ], JSON.stringify(first))
    assert.match(first[1][2], /TypeError/)
  } finally {
    s.proxy.dropIf = null
  }
  // The next pass fetches the two lost outcomes: the gateway replays them.
  const second = await pass()
  assert.deepEqual(second.map(([n, status, , replayed]) => [n, status, replayed]), [['lossy-1', 'sent', true], ['lossy-4', 'sent', true]])
  for (let i = 0; i < 6; i++) assert.equal(s.upstream.count(USER2, SAVE, JSON.stringify({ n: `lossy-${i}` })), 1, `lossy-${i}`)
  await page.close()
})
