// IdemClient: a key per logical request, stored in the outbox before the
// first byte is sent, sent again with the same key and body until the server
// gives an outcome, and each outcome handed to the app before its entry is
// deleted.

import { decodeBody, encodeBody, type IdemBody } from './body.js'
import { IdemError, type IdemErrorCode, type IdemErrorFields } from './errors.js'
import { MemoryOutbox, type IdemFetchOptions, type Outbox, type PendingEntry } from './outbox.js'
import { classify, IdemResponse, retryAfterMs } from './response.js'

export const DEFAULT_SECRET_HEADERS: readonly string[] = ['authorization', 'proxy-authorization', 'cookie', 'x-api-key']
export const DEFAULT_SCOPE_HEADERS: readonly string[] = ['authorization', 'cookie', 'x-user-id', 'x-organization-id']
export const DAY = 24 * 60 * 60 * 1000

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/** What fetch takes as headers (a Headers, a record, or name-value pairs). */
export type HeadersInput = ConstructorParameters<typeof Headers>[0]

/** The fetch the client calls: globalThis.fetch, or anything that takes a URL string and an init. */
export type FetchLike = (url: string, init: RequestInit) => Promise<Response>

/** request()'s options. Not fetch's RequestInit: method is required, and body may be a JSON value. */
export interface IdemRequestInit extends IdemFetchOptions {
  /**
   * Required: 'POST', 'PUT', 'PATCH', 'DELETE'... get a key and the outbox;
   * 'GET', 'HEAD', 'OPTIONS' go out once, unkeyed, like fetch (a key on them
   * is refused: servers pass them through untouched).
   */
  method: string
  headers?: HeadersInput
  /** See IdemBody: text, bytes, Blob, FormData, URLSearchParams, or a JSON value. */
  body?: IdemBody | null
  /** The key of this logical request; default: the Idempotency-Key header, else newKey(). */
  key?: string
  signal?: AbortSignal
  /** Attempts for this call. Default: the client's maxAttempts. */
  maxAttempts?: number
}

/** The end of an entry: it has an outcome and leaves the outbox. */
export type FinalStatus = 'sent' | 'failed' | 'conflict' | 'expired'

/**
 * An entry's outcome, handed to onOutcome before the entry is deleted.
 * 'sent': response is the outcome (2xx or 3xx, first answer or replay);
 * 'failed' and 'conflict': error.response is the server's answer; 'expired':
 * dropped unsent (error.keyExpiresAt says why, when the server said).
 */
export interface Outcome {
  entry: PendingEntry
  status: FinalStatus
  response?: IdemResponse
  error?: IdemError
}

/**
 * Called with each outcome before its entry leaves the outbox, and awaited:
 * when it throws, the entry stays and the outcome comes again (replayed by
 * the server) on a later pass. A crash between its return and the deletion
 * also brings the outcome again: tell them apart by entry.id.
 */
export type OutcomeHandler = (outcome: Outcome) => void | Promise<void>

export type PendingStatus = 'sent' | 'busy' | 'gone' | IdemErrorCode

/** One entry's result in a retryPending pass. */
export interface PendingResult {
  entry: PendingEntry
  /** 'busy': another sender holds it; 'gone': finished by another sender; else its outcome or IdemError code. */
  status: PendingStatus
  response?: IdemResponse
  error?: IdemError
}

export interface RetryPendingOptions {
  signal?: AbortSignal
  /** Entries sent at once. Default: the client's concurrency. */
  concurrency?: number
  /** Attempts per entry in this pass. Default: the client's pendingAttempts. */
  maxAttempts?: number
  /** Called for each final outcome of this pass, after the client's own onOutcome. */
  onOutcome?: OutcomeHandler
}

export interface IdemClientOptions {
  /** Default: a MemoryOutbox. */
  outbox?: Outbox
  /** Default: globalThis.fetch. */
  fetch?: FetchLike
  /** Resolves relative URLs; default location.href in browsers. */
  baseURL?: string
  /** Default: crypto.randomUUID(). */
  newKey?: () => string
  /** Default: a digest of Authorization, Cookie, X-User-ID, X-Organization-ID ('' when none). */
  scope?: (headers: Headers) => string | Promise<string>
  /** Left out of the outbox. Default: authorization, proxy-authorization, cookie, x-api-key. */
  secretHeaders?: readonly string[]
  /** Puts credentials back before an entry is sent from the outbox. */
  authorize?: (headers: Headers, entry: PendingEntry) => void | Promise<void>
  /** Attempts per request() call. Default: Infinity (until giveUpAfter or the key's expiry). */
  maxAttempts?: number
  /** Age after which a logical request is given up unsent, ms. Default: 24 h. */
  giveUpAfter?: number
  /**
   * How long before the key's announced expiry (Idempotency-Key-Expires)
   * the client stops sending it, ms: an attempt must reach the server while
   * it still knows the key. Default: 60 s.
   */
  keyExpiryMargin?: number
  /** Wait before attempt n+1 without Retry-After, ms. Default: 250 ms doubling to 30 s, jittered. */
  backoff?: (attempt: number) => number
  /** Cap on Retry-After, ms. Default: 60 s. */
  maxRetryAfter?: number
  /** The clock, ms since the epoch. Default: Date.now. */
  now?: () => number
  /** retryPending's parallelism. Default: 4. */
  concurrency?: number
  /** retryPending's attempts per entry. Default: 3. */
  pendingAttempts?: number
  /** Called before every attempt of a keyed request. */
  onAttempt?: (entry: PendingEntry, attempt: number) => void
  /** Called with every final outcome, from request() and retryPending alike, before the entry is deleted. */
  onOutcome?: OutcomeHandler
}

// 64-bit FNV-1a twice over, for platforms without crypto.subtle (React
// Native): an entry's ID only has to tell entries apart, it protects nothing.
function fnvHex(s: string): string {
  let out = ''
  for (const seed of [0xcbf29ce484222325n, 0x84222325cbf29ce4n]) {
    let h = seed
    for (let i = 0; i < s.length; i++) {
      h ^= BigInt(s.charCodeAt(i))
      h = (h * 0x100000001b3n) & 0xffffffffffffffffn
    }
    out += h.toString(16).padStart(16, '0')
  }
  return out
}

/** digest returns a hex digest of s (SHA-256 where crypto.subtle exists). */
export async function digest(s: string): Promise<string> {
  const subtle = globalThis.crypto?.subtle
  if (subtle) {
    const b = await subtle.digest('SHA-256', new TextEncoder().encode(s))
    return Array.from(new Uint8Array(b), x => x.toString(16).padStart(2, '0')).join('')
  }
  return fnvHex(s)
}

/** defaultScope is a digest of the headers that tell users apart, or ''. */
export async function defaultScope(headers: Headers): Promise<string> {
  const parts: string[] = []
  for (const name of DEFAULT_SCOPE_HEADERS) {
    const v = headers.get(name)
    if (v !== null) parts.push(name + '\0' + v)
  }
  return parts.length ? (await digest(parts.join('\0'))).slice(0, 32) : ''
}

/** entryId is an entry's identity: its scope, method, URL and key. */
export function entryId(e: Pick<PendingEntry, 'scope' | 'method' | 'url' | 'key'>): Promise<string> {
  return digest(['outbox', e.scope, e.method, e.url, e.key].join('\0'))
}

function defaultNewKey(): string {
  if (typeof globalThis.crypto?.randomUUID === 'function') return globalThis.crypto.randomUUID()
  // React Native without a crypto polyfill: a version-4 UUID from Math.random
  // is unique enough for keys, which are not secrets.
  return 'xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx'.replace(/[xy]/g, c => {
    const r = (Math.random() * 16) | 0
    return (c === 'x' ? r : (r & 0x3) | 0x8).toString(16)
  })
}

function defaultBackoff(attempt: number): number {
  const d = Math.min(30000, 250 * 2 ** Math.min(attempt - 1, 10))
  return d / 2 + Math.random() * (d / 2)
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason)
    const onAbort = () => {
      clearTimeout(t)
      reject(signal?.reason)
    }
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

// Connection failures that say the request never left: the server or the
// network is down, so a retryPending pass stops at once.
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'ENETDOWN', 'UND_ERR_CONNECT_TIMEOUT'])

function errorCode(err: unknown): string | undefined {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string' && code) return code
  }
  return undefined
}

// A browser says so when it has no network at all; elsewhere (Node, React
// Native without NetInfo) navigator.onLine is absent and nothing is assumed.
function browserOffline(): boolean {
  const nav = (globalThis as { navigator?: { onLine?: unknown } }).navigator
  return nav?.onLine === false
}

// Errors without a code (a browser's "Failed to fetch") on this many entries
// in a row, with no answer between them, end a retryPending pass as offline.
// One alone is a lost answer: that entry stays pending and the pass goes on.
const LOST_IN_A_ROW = 3

interface WebLocks {
  request<T>(name: string, options: { ifAvailable?: boolean; signal?: AbortSignal }, fn: (lock: unknown) => Promise<T>): Promise<T>
}

function webLocks(): WebLocks | undefined {
  const locks = (globalThis as { navigator?: { locks?: WebLocks } }).navigator?.locks
  return locks && typeof locks.request === 'function' ? locks : undefined
}

// Locks held in this JavaScript realm, per outbox: two clients over one
// outbox never send one entry at once.
const localLocks = new WeakMap<Outbox, Map<string, Promise<void>>>()

async function localLock(outbox: Outbox, id: string, wait: boolean): Promise<(() => void) | null> {
  let m = localLocks.get(outbox)
  if (!m) localLocks.set(outbox, (m = new Map()))
  while (m.has(id)) {
    if (!wait) return null
    await m.get(id)
  }
  let release!: () => void
  m.set(id, new Promise<void>(r => (release = r)))
  return () => {
    m.delete(id)
    release()
  }
}

const SKIPPED = Symbol('skipped')

// An OutcomeHandler's error, carried through the send loop so that it is
// told apart from the client's own IdemErrors and rethrown as it was.
class HandlerFailure {
  constructor(readonly error: unknown) {}
}

const FETCH_OPTIONS = ['credentials', 'mode', 'redirect', 'keepalive', 'cache', 'referrer', 'referrerPolicy', 'integrity'] as const

function fetchOptions(init: IdemRequestInit): IdemFetchOptions | undefined {
  if (init.mode !== undefined && init.mode !== 'cors' && init.mode !== 'same-origin') {
    throw new TypeError(`@idem-dev/client: mode ${JSON.stringify(init.mode)} is refused: the client must read the answer to know the outcome; use 'cors' or 'same-origin'`)
  }
  const out: Record<string, unknown> = {}
  for (const k of FETCH_OPTIONS) if (init[k] !== undefined) out[k] = init[k]
  return Object.keys(out).length ? (out as IdemFetchOptions) : undefined
}

interface SendContext {
  /** request()'s own headers, secrets included; undefined: rebuilt from the entry and authorize. */
  headers?: Headers
  signal?: AbortSignal
  maxAttempts: number
  /** Sent from the outbox by retryPending: unreachable and lost answers end the attempt at once. */
  fromOutbox: boolean
  handlers: OutcomeHandler[]
}

/**
 * IdemClient wraps fetch: request() gives each logical request a key, writes
 * it to the outbox before sending, and retries it with the same key and body
 * until the server gives an outcome; retryPending() sends what is left after
 * a restart or when the network returns.
 */
export class IdemClient {
  readonly outbox: Outbox
  readonly #fetch: FetchLike
  readonly #o: IdemClientOptions
  readonly #secretHeaders: string[]
  readonly #now: () => number

  constructor(options: IdemClientOptions = {}) {
    this.outbox = options.outbox ?? new MemoryOutbox()
    this.#fetch = options.fetch ?? ((url, init) => globalThis.fetch(url, init))
    this.#o = options
    this.#secretHeaders = (options.secretHeaders ?? DEFAULT_SECRET_HEADERS).map(h => h.toLowerCase())
    this.#now = options.now ?? Date.now
  }

  #url(url: string | URL): string {
    const base = this.#o.baseURL ?? (globalThis as { location?: { href?: string } }).location?.href
    return base ? new URL(url, base).toString() : String(url)
  }

  /**
   * request sends one logical request. A keyed one (any method but GET,
   * HEAD, OPTIONS, TRACE) resolves with its outcome (2xx or 3xx, first answer
   * or replay) and rejects with an IdemError otherwise; error.key is the key
   * to send it again with. An unkeyed one resolves with whatever the server
   * answered, as fetch does, and rejects with an IdemError 'network' or
   * 'aborted'. Programming errors (no method, a body the outbox cannot keep)
   * are TypeErrors, thrown before anything is stored or sent.
   */
  async request(url: string | URL, init: IdemRequestInit): Promise<IdemResponse> {
    if (!init || typeof init.method !== 'string' || !init.method) {
      throw new TypeError("@idem-dev/client: request() needs init.method ('POST', 'PUT', 'PATCH', 'DELETE'; or 'GET' for an unkeyed read): there is no default, so that no request goes out with a method it was not written for")
    }
    const method = init.method.toUpperCase()
    const headers = new Headers(init.headers)
    const options = fetchOptions(init)
    const full = this.#url(url)
    const signal = init.signal
    if (SAFE_METHODS.has(method)) {
      if (init.key !== undefined || headers.has('idempotency-key')) {
        throw new TypeError(`@idem-dev/client: ${method} takes no idempotency key (servers pass ${method} through untouched, so a key would promise nothing); send the mutation with POST, PUT, PATCH or DELETE`)
      }
      if ((method === 'GET' || method === 'HEAD') && init.body != null) throw new TypeError(`@idem-dev/client: a ${method} request has no body`)
      const stored = await encodeBody(init.body, headers)
      let res: Response
      let text: string
      try {
        res = await this.#fetch(full, { ...options, method, headers, body: decodeBody(stored) as RequestInit['body'], signal })
        text = await res.text()
      } catch (err) {
        if (signal?.aborted) throw new IdemError('aborted', `${method} ${full} aborted`, { attempts: 1, cause: err })
        throw new IdemError('network', `${method} ${full}: no answer (${String(err)})`, { attempts: 1, cause: err })
      }
      return new IdemResponse({ url: full, status: res.status, statusText: res.statusText, headers: res.headers, text, key: '', attempts: 1 })
    }
    const key = init.key ?? headers.get('idempotency-key') ?? this.#newKey()
    headers.set('idempotency-key', key)
    const stored = await encodeBody(init.body, headers)
    const entry: PendingEntry = {
      id: '',
      key,
      method,
      url: full,
      scope: await (this.#o.scope ?? defaultScope)(headers),
      headers: [...headers].filter(([k]) => !this.#secretHeaders.includes(k.toLowerCase())),
      ...stored,
      ...(options ? { options } : {}),
      created: this.#now(),
    }
    entry.id = await entryId(entry)
    // The same logical request again (the app retried it with its key):
    // its age and the key's known expiry carry over.
    const prev = await this.outbox.get(entry.id)
    if (prev) {
      entry.created = prev.created
      if (prev.keyExpires !== undefined) {
        entry.keyExpires = prev.keyExpires
        if (prev.keyExpiresAt !== undefined) entry.keyExpiresAt = prev.keyExpiresAt
      }
    }
    // Store the key before the request: if the app dies now, retryPending
    // sends it again with the same key.
    await this.outbox.put(entry)
    const ctx: SendContext = {
      headers, signal, fromOutbox: false, maxAttempts: init.maxAttempts ?? this.#o.maxAttempts ?? Infinity,
      handlers: this.#o.onOutcome ? [this.#o.onOutcome] : [],
    }
    try {
      const r = await this.#lock(entry.id, true, signal, () => this.#send(entry, ctx))
      if (r === SKIPPED) throw new Error('unreachable: a waiting lock skipped')
      return r
    } catch (err) {
      if (err instanceof HandlerFailure) throw err.error
      if (signal?.aborted && !(err instanceof IdemError)) {
        throw new IdemError('aborted', `${method} ${full} (key ${key}) aborted while another sender held it; it stays pending`, { key, entry, cause: err })
      }
      throw err
    }
  }

  #newKey(): string {
    return (this.#o.newKey ?? defaultNewKey)()
  }

  // #lock runs fn as the only sender of entry id in this realm, and across
  // processes (the outbox's claim: FileOutbox) or tabs (navigator.locks),
  // waiting for it or, without wait, returning SKIPPED when someone else
  // holds it.
  async #lock<T>(id: string, wait: boolean, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T | typeof SKIPPED> {
    const release = await localLock(this.outbox, id, wait)
    if (!release) return SKIPPED
    try {
      const { claim, release: unclaim } = this.outbox
      if (typeof claim === 'function' && typeof unclaim === 'function') {
        let token: string | null
        for (;;) {
          token = await claim.call(this.outbox, id)
          if (token || !wait) break
          await sleep(50, signal)
        }
        if (!token) return SKIPPED
        try {
          return await fn()
        } finally {
          await unclaim.call(this.outbox, id, token)
        }
      }
      const locks = webLocks()
      if (locks) {
        const opts = wait ? (signal ? { signal } : {}) : { ifAvailable: true }
        return await locks.request('idem-outbox:' + id, opts, async lock => (lock ? fn() : SKIPPED))
      }
      return await fn()
    } finally {
      release()
    }
  }

  // #finish hands an outcome to the app, then deletes its entry: a crash
  // between the two brings the outcome again, never loses it.
  async #finish(outcome: Outcome, handlers: OutcomeHandler[]): Promise<void> {
    for (const h of handlers) {
      try {
        await h(outcome)
      } catch (err) {
        throw new HandlerFailure(err)
      }
    }
    await this.outbox.delete(outcome.entry.id)
  }

  // #learnExpiry keeps the key's expiry the server announced on an answer
  // that leaves the entry pending (409 in_progress, 5xx), so that no later
  // attempt, in this process or after a restart, sends the key once the
  // server has forgotten it. The moment is moved to the client's clock by
  // the answer's Date, so that a skewed clock cannot stretch it.
  async #learnExpiry(entry: PendingEntry, response: IdemResponse): Promise<void> {
    const exp = response.keyExpiresAt
    if (!exp || entry.keyExpiresAt === exp.toISOString()) return
    const serverNow = Date.parse(response.headers.get('date') ?? '')
    entry.keyExpiresAt = exp.toISOString()
    entry.keyExpires = Number.isNaN(serverNow) ? exp.getTime() : this.#now() + (exp.getTime() - serverNow)
    await this.outbox.put(entry)
  }

  #expired(entry: PendingEntry): string | undefined {
    const now = this.#now()
    const giveUpAfter = this.#o.giveUpAfter ?? DAY
    if (now - entry.created > giveUpAfter) return `is older than ${giveUpAfter} ms`
    const margin = this.#o.keyExpiryMargin ?? 60_000
    if (entry.keyExpires !== undefined && now + margin >= entry.keyExpires) {
      return `has a key the server keeps only until ${entry.keyExpiresAt ?? new Date(entry.keyExpires).toISOString()} (margin ${margin} ms); sent again it could run again`
    }
    return undefined
  }

  async #send(entry: PendingEntry, ctx: SendContext): Promise<IdemResponse> {
    const { signal, maxAttempts, fromOutbox } = ctx
    const what = `${entry.method} ${entry.url} (key ${entry.key})`
    let last: { code: IdemErrorCode; cause?: unknown; fields?: IdemErrorFields } | undefined
    let mayHaveRun = fromOutbox // a stored entry may have been sent before a crash
    for (let attempt = 1; ; attempt++) {
      const fields: IdemErrorFields = { key: entry.key, entry, attempts: attempt - 1 }
      const why = this.#expired(entry)
      if (why) {
        const error = new IdemError('expired', `${what} ${why}; dropped unsent`, {
          ...fields, mayHaveRun, ...(entry.keyExpiresAt ? { keyExpiresAt: new Date(entry.keyExpiresAt) } : {}),
        })
        await this.#finish({ entry, status: 'expired', error }, ctx.handlers)
        throw error
      }
      let h = ctx.headers
      if (!h) {
        h = new Headers(entry.headers)
        if (this.#o.authorize) await this.#o.authorize(h, entry)
      }
      h.set('idempotency-key', entry.key)
      this.#o.onAttempt?.(entry, attempt)
      let res: Response | undefined
      let text = ''
      try {
        res = await this.#fetch(entry.url, { ...entry.options, method: entry.method, headers: h, body: decodeBody(entry) as RequestInit['body'], signal })
        text = await res.text()
      } catch (err) {
        if (signal?.aborted) {
          throw new IdemError('aborted', `${what} aborted; it stays pending`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
        }
        res = undefined
        mayHaveRun = true
        last = { code: 'gave_up', cause: err }
        if (fromOutbox) {
          const code = errorCode(err)
          if (browserOffline() || (code !== undefined && UNREACHABLE.has(code))) {
            throw new IdemError('offline', `server unreachable for ${what}`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
          }
          if (code === undefined) {
            // A browser's "Failed to fetch": the answer was lost, or the
            // network is down. The entry stays; the pass tries the next.
            throw new IdemError('network', `${what}: no answer (${String(err)}); it stays pending`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
          }
        }
      }
      let wait = 0
      if (res) {
        mayHaveRun = true
        const { verdict, kind } = classify(res.status, res.headers, text)
        const response = new IdemResponse({ url: entry.url, status: res.status, statusText: res.statusText, headers: res.headers, text, key: entry.key, attempts: attempt })
        const f: IdemErrorFields = { ...fields, attempts: attempt, kind, status: res.status, body: response.json() ?? text, response, mayHaveRun }
        if (verdict === 'final') {
          if (response.ok || (res.status >= 300 && res.status < 400)) {
            await this.#finish({ entry, status: 'sent', response }, ctx.handlers)
            return response
          }
          const error = new IdemError('failed', `${what}: status ${res.status}`, f)
          await this.#finish({ entry, status: 'failed', response, error }, ctx.handlers)
          throw error
        }
        if (verdict === 'conflict') {
          const error = new IdemError('conflict', `${what}: status ${res.status} ${kind}: the key belongs to an earlier request; it ran, do not resend with a new key`, f)
          await this.#finish({ entry, status: 'conflict', response, error }, ctx.handlers)
          throw error
        }
        await this.#learnExpiry(entry, response)
        last = { code: verdict === 'running' ? 'in_progress' : 'gave_up', fields: f }
        wait = Math.min(retryAfterMs(res.headers.get('retry-after'), this.#now()), this.#o.maxRetryAfter ?? 60000)
      }
      if (attempt >= maxAttempts) {
        const code = last?.code ?? 'gave_up'
        throw new IdemError(code, `${what}: no outcome after ${attempt} attempt(s) (${code}); it stays pending`,
          { ...fields, attempts: attempt, mayHaveRun, ...last?.fields, cause: last?.cause })
      }
      try {
        await sleep(wait > 0 ? wait : (this.#o.backoff ?? defaultBackoff)(attempt), signal)
      } catch (err) {
        throw new IdemError('aborted', `${what} aborted; it stays pending`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
      }
    }
  }

  /**
   * retryPending sends the outbox's entries again, each with its key: on
   * start-up, or when the network returns. At most `concurrency` at once,
   * each up to `pendingAttempts` times. It stops, leaving the rest pending
   * ('offline'), when the network is down (navigator.onLine false), the
   * server refuses connections, or three entries in a row get no answer; one
   * lost answer leaves that entry pending ('network') and the pass goes on.
   * Safe to call concurrently, from several tabs (navigator.locks) or
   * processes (FileOutbox): one sender per entry; the others report it as
   * 'busy'. Each final outcome goes to onOutcome before its entry is
   * deleted; resolves with one result per entry, oldest first. When an
   * onOutcome handler throws, the pass starts no more entries and rejects
   * with that error once the running ones are done.
   */
  async retryPending(options: RetryPendingOptions = {}): Promise<PendingResult[]> {
    const { signal } = options
    const concurrency = Math.max(1, options.concurrency ?? this.#o.concurrency ?? 4)
    const maxAttempts = options.maxAttempts ?? this.#o.pendingAttempts ?? 3
    const handlers = [this.#o.onOutcome, options.onOutcome].filter((h): h is OutcomeHandler => !!h)
    const entries = (await this.outbox.list()).sort((a, b) => a.created - b.created)
    const results: PendingResult[] = new Array(entries.length)
    let offline = false
    let lostInARow = 0
    let failure: { error: unknown } | undefined
    let next = 0
    const worker = async () => {
      while (next < entries.length && !failure) {
        const i = next++
        const entry = entries[i] as PendingEntry
        if (offline || browserOffline()) {
          results[i] = { entry, status: 'offline', error: new IdemError('offline', 'network down or server unreachable; not sent', { key: entry.key, entry }) }
          continue
        }
        let r: PendingResult | typeof SKIPPED
        try {
          r = await this.#lock(entry.id, false, signal, async (): Promise<PendingResult> => {
            // Re-read it: another sender may have finished it since list().
            const cur = await this.outbox.get(entry.id)
            if (!cur) return { entry, status: 'gone' }
            try {
              const response = await this.#send(cur, { signal, maxAttempts, fromOutbox: true, handlers })
              return { entry: cur, status: 'sent', response }
            } catch (error) {
              if (!(error instanceof IdemError)) throw error
              return { entry: cur, status: error.code, error, ...(error.response ? { response: error.response } : {}) }
            }
          })
        } catch (err) {
          failure ??= { error: err instanceof HandlerFailure ? err.error : err }
          return
        }
        const result: PendingResult = r === SKIPPED ? { entry, status: 'busy' } : r
        results[i] = result
        if (result.status === 'offline') offline = true
        else if (result.status === 'network') {
          if (++lostInARow >= LOST_IN_A_ROW) offline = true
        } else if (result.status === 'sent' || (result.error?.status ?? 0) > 0) lostInARow = 0
      }
    }
    await Promise.all(Array.from({ length: Math.min(concurrency, entries.length) }, worker))
    if (failure) throw failure.error
    return results
  }
}
