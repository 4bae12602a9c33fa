// A Node app's use of the published package, type-checked with tsc --strict
// under lib es2022 and @types/node, no DOM, no skipLibCheck
// (tsconfig.node.json), then run: scripts/pack-check.sh installs the packed
// tarball next to it.
import {
  IdemClient, IdemError, IdemResponse, MemoryOutbox,
  type IdemErrorCode, type IdemRequestInit, type Outcome, type PendingResult,
} from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const outcomes: Outcome[] = []
const client = new IdemClient({
  outbox: new FileOutbox(mkdtempSync(join(tmpdir(), 'idem-consumer-')), { staleAfter: 10_000 }),
  baseURL: 'http://127.0.0.1:9',
  // A stand-in for the server: this check runs without a network.
  fetch: async (url, init) => new Response(JSON.stringify({ url, method: init.method }), { status: 201, headers: { 'content-type': 'application/json' } }),
  onOutcome: async o => {
    outcomes.push(o)
  },
})

const init: IdemRequestInit = { method: 'POST', body: { amount: 1 }, credentials: 'include', redirect: 'follow', keepalive: false, mode: 'cors' }
const res: IdemResponse = await client.request('/charges', init)
const expires: Date | undefined = res.keyExpiresAt
const data = res.json<{ url: string; method: string }>()
await client.request(new URL('http://127.0.0.1:9/bytes'), { method: 'PUT', body: new Uint8Array([1, 2]) })
await client.request('/blob', { method: 'PUT', body: new Blob(['x'], { type: 'text/plain' }) })
await client.request('/form', { method: 'POST', body: new URLSearchParams({ a: '1' }) })
const form = new FormData()
form.append('a', 'b')
await client.request('/form', { method: 'POST', body: form })

const err = new IdemError('conflict', 'message', { key: 'k', status: 409 })
const code: IdemErrorCode = err.code
const errExpires: Date | undefined = err.keyExpiresAt
let refused = false
try {
  // @ts-expect-error a message is not a code
  new IdemError('msg')
} catch {
  refused = true
}
// @ts-expect-error the method is required
await client.request('/x', { body: '{}' }).catch(() => {})
// @ts-expect-error mode no-cors would hide the answer
const noCors: IdemRequestInit = { method: 'POST', mode: 'no-cors' }
void noCors

const memory = new MemoryOutbox()
const results: PendingResult[] = await new IdemClient({ outbox: memory }).retryPending({ onOutcome: (o: Outcome) => void o.status })
const made = new IdemResponse({ url: 'http://x/', status: 200, headers: new Headers(), text: '' })

console.log(JSON.stringify({
  status: res.status, data, outcomes: outcomes.map(o => o.status), results: results.length,
  code, refused, expires: expires ?? null, errExpires: errExpires ?? null, made: made.ok,
}))
