// @idem-dev/client: safe retries for mutating HTTP calls. One idempotency key
// per user intent, stored in an outbox before the first byte is sent, sent
// again with the same key and body until the server gives an outcome, and
// the error shapes of every idem gateway profile (ietf, stripe, mobile,
// workflow-admin) read into one typed error. No runtime dependencies:
// fetch, crypto.randomUUID and (when present) crypto.subtle and
// navigator.locks.

export const DEFAULT_SECRET_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'x-api-key']
export const DEFAULT_SCOPE_HEADERS = ['authorization', 'cookie', 'x-user-id', 'x-organization-id']
export const DAY = 24 * 60 * 60 * 1000

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

// idem's answers that bind the key to an earlier request: the first request
// ran (or was tried), so a new key would run the operation again.
export const CONFLICT_KINDS = new Set(['payload_mismatch', 'key_reused', 'previous_failure', 'response_not_stored', 'outcome_unknown'])

// The mobile app's error codes, in its {"success":false,"error":{...}} shape.
const MOBILE_CODES = {
  OPERATION_IN_PROGRESS: 'in_progress',
  DUPLICATE_OPERATION: 'payload_mismatch',
  PREVIOUS_OPERATION_FAILED: 'previous_failure',
  RESPONSE_NOT_STORED: 'response_not_stored',
  OUTCOME_UNKNOWN: 'outcome_unknown',
}

/**
 * IdemError is every failure of the client. code says what happened:
 * - 'conflict': the server bound the key to another request (payload_mismatch,
 *   key_reused, the mobile app's 409 DUPLICATE_OPERATION, previous_failure,
 *   response_not_stored, outcome_unknown). The first request ran: do not resend with a new key.
 * - 'failed': a final answer that is not a success (400, 401, 404, 422 from
 *   the API, the API's own 409...); `response` holds it.
 * - 'in_progress': the first request with the key still runs; the entry stays
 *   in the outbox (retryPending will fetch its outcome).
 * - 'gave_up': no outcome after the last attempt (network errors, 5xx, 429);
 *   the entry stays in the outbox.
 * - 'offline': retryPending did not send the entry, the server is unreachable.
 * - 'expired': older than giveUpAfter (24 h): dropped unsent, the server has
 *   forgotten the key.
 * - 'aborted': the caller's signal; the entry stays in the outbox.
 */
export class IdemError extends Error {
  constructor(code, message, fields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause })
    this.name = 'IdemError'
    this.code = code
    this.key = fields.key
    this.kind = fields.kind ?? ''
    this.status = fields.status ?? 0
    this.body = fields.body
    this.response = fields.response
    this.entry = fields.entry
    this.attempts = fields.attempts ?? 0
    // false only when no attempt was made; a network error may come after the
    // server received the request, so it counts as "may have run".
    this.mayHaveRun = fields.mayHaveRun ?? true
  }
  /** Whether the request is still in the outbox, to be sent by retryPending. */
  get pending() {
    return this.code === 'in_progress' || this.code === 'gave_up' || this.code === 'offline' || this.code === 'aborted'
  }
}

function parseJSON(text) {
  if (!text) return undefined
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * problemKind returns the kind of idempotency problem an answer names, or ''.
 * It reads every shape the gateway writes and Stripe's: problem+json's
 * conflict_type or the fragment of its type URI; the mobile app's
 * error.details.conflictType or error.code; Stripe's error.type
 * "idempotency_error" (in_progress when its message says a request is still
 * in progress, payload_mismatch otherwise).
 */
export function problemKind(headers, text) {
  const ct = (headers.get('content-type') || '').toLowerCase()
  if (ct && !ct.includes('json')) return ''
  const doc = typeof text === 'string' ? parseJSON(text) : text
  if (!doc || typeof doc !== 'object') return ''
  if (typeof doc.conflict_type === 'string' && doc.conflict_type) return doc.conflict_type
  if (typeof doc.type === 'string') {
    const i = doc.type.indexOf('#')
    if (i >= 0 && i < doc.type.length - 1) return doc.type.slice(i + 1)
    // A type URI naming the kind in its last path segment: taken only when
    // it is a kind the client acts on, since any URI ends in some segment.
    const last = doc.type.slice(Math.max(doc.type.lastIndexOf('/'), doc.type.lastIndexOf(':')) + 1)
    if (last === 'in_progress' || CONFLICT_KINDS.has(last)) return last
  }
  const e = doc.error
  if (e && typeof e === 'object') {
    const ct2 = e.details && e.details.conflictType
    if (typeof ct2 === 'string' && ct2) return ct2
    if (typeof e.code === 'string' && MOBILE_CODES[e.code]) return MOBILE_CODES[e.code]
    if (e.type === 'idempotency_error') {
      const m = String(e.message || '').toLowerCase()
      return m.includes('in progress') || m.includes('in-progress') ? 'in_progress' : 'payload_mismatch'
    }
  }
  return ''
}

/** replayed reports whether an answer came from the server's record. */
export function replayed(headers, json) {
  return (
    headers.get('idempotent-replayed') === 'true' ||
    headers.get('x-idempotency-cached') === 'true' ||
    (!!json && typeof json === 'object' && json.idempotency_replayed === true)
  )
}

/**
 * classify says what an answer means: 'final' (the outcome), 'retry'
 * (nothing ran or no outcome yet: 408, 429, 5xx), 'running' (in_progress) or
 * 'conflict'. A replay is always final; a 409 without a name is in_progress
 * when it carries Retry-After (idem's does) and otherwise the API's own
 * stored answer.
 */
export function classify(status, headers, text) {
  const json = parseJSON(text)
  if (replayed(headers, json)) return { verdict: 'final', kind: '' }
  const kind = problemKind(headers, json)
  if (kind === 'in_progress') return { verdict: 'running', kind }
  if (CONFLICT_KINDS.has(kind)) return { verdict: 'conflict', kind }
  if (status === 409 && headers.get('retry-after')) return { verdict: 'running', kind: 'in_progress' }
  if (status === 408 || status === 429 || (status >= 500 && status !== 501 && status !== 505)) {
    return { verdict: 'retry', kind }
  }
  return { verdict: 'final', kind }
}

/** retryAfterMs parses Retry-After (seconds or an HTTP date); 0 when absent. */
export function retryAfterMs(value, now = Date.now()) {
  if (!value) return 0
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000
  const t = Date.parse(value)
  return Number.isNaN(t) ? 0 : Math.max(0, t - now)
}

/** The outcome of a request: its answer, read into memory. */
export class IdemResponse {
  constructor({ url, status, statusText = '', headers, text, key, attempts }) {
    this.url = url
    this.status = status
    this.statusText = statusText
    this.headers = headers
    this.text = text
    this.key = key
    this.attempts = attempts
    this.replayed = replayed(headers, parseJSON(text))
  }
  get ok() {
    return this.status >= 200 && this.status < 300
  }
  /** The body parsed as JSON (undefined when it is not JSON). */
  json() {
    return parseJSON(this.text)
  }
}

// 64-bit FNV-1a twice over, for platforms without crypto.subtle (React
// Native): an entry's ID only has to tell entries apart, it protects nothing.
function fnvHex(s) {
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
export async function digest(s) {
  const subtle = globalThis.crypto && globalThis.crypto.subtle
  if (subtle) {
    const b = await subtle.digest('SHA-256', new TextEncoder().encode(s))
    return Array.from(new Uint8Array(b), x => x.toString(16).padStart(2, '0')).join('')
  }
  return fnvHex(s)
}

/** defaultScope is a digest of the headers that tell users apart, or ''. */
export async function defaultScope(headers) {
  const parts = []
  for (const name of DEFAULT_SCOPE_HEADERS) {
    const v = headers.get(name)
    if (v !== null) parts.push(name + '\0' + v)
  }
  return parts.length ? (await digest(parts.join('\0'))).slice(0, 32) : ''
}

/** entryId is an entry's identity: its scope, method, URL and key. */
export function entryId(e) {
  return digest(['outbox', e.scope, e.method, e.url, e.key].join('\0'))
}

function defaultNewKey() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === 'function') return globalThis.crypto.randomUUID()
  // React Native without a crypto polyfill: a version-4 UUID from Math.random
  // is unique enough for keys, which are not secrets.
  return 'xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx'.replace(/[xy]/g, c => {
    const r = (Math.random() * 16) | 0
    return (c === 'x' ? r : (r & 0x3) | 0x8).toString(16)
  })
}

function defaultBackoff(attempt) {
  const d = Math.min(30000, 250 * 2 ** Math.min(attempt - 1, 10))
  return d / 2 + Math.random() * (d / 2)
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason)
    const t = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = () => {
      clearTimeout(t)
      reject(signal.reason)
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
  })
}

// Connection failures that say the request never left. A browser's fetch
// says only "Failed to fetch": without a code, the network counts as down.
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'ENETDOWN', 'UND_ERR_CONNECT_TIMEOUT'])

function unreachable(err) {
  let code
  for (let e = err; e && !code; e = e.cause) code = e.code
  return !code || UNREACHABLE.has(code)
}

// Locks held in this JavaScript realm, per outbox: two clients over one
// outbox never send one entry at once.
const localLocks = new WeakMap()

async function localLock(outbox, id, wait) {
  let m = localLocks.get(outbox)
  if (!m) localLocks.set(outbox, (m = new Map()))
  while (m.has(id)) {
    if (!wait) return null
    await m.get(id)
  }
  let release
  m.set(id, new Promise(r => (release = r)))
  return () => {
    m.delete(id)
    release()
  }
}

const SKIPPED = Symbol('skipped')

/**
 * IdemClient wraps fetch: request() gives each logical request a key, writes
 * it to the outbox before sending, and retries it with the same key and body
 * until the server gives an outcome; retryPending() sends what is left after
 * a restart or when the network returns.
 */
export class IdemClient {
  constructor(options = {}) {
    this.outbox = options.outbox || new MemoryOutbox()
    this.fetch = options.fetch || ((...a) => globalThis.fetch(...a))
    this.baseURL = options.baseURL
    this.newKey = options.newKey || defaultNewKey
    this.scope = options.scope || defaultScope
    this.secretHeaders = (options.secretHeaders || DEFAULT_SECRET_HEADERS).map(h => h.toLowerCase())
    this.authorize = options.authorize
    this.maxAttempts = options.maxAttempts ?? Infinity
    this.giveUpAfter = options.giveUpAfter ?? DAY
    this.backoff = options.backoff || defaultBackoff
    this.maxRetryAfter = options.maxRetryAfter ?? 60000
    this.now = options.now || Date.now
    this.concurrency = options.concurrency ?? 4
    this.pendingAttempts = options.pendingAttempts ?? 3
    this.onAttempt = options.onAttempt
  }

  #url(url) {
    const base = this.baseURL ?? (globalThis.location && globalThis.location.href)
    return base ? new URL(url, base).toString() : String(url)
  }

  /**
   * request sends one logical request. It resolves with its outcome (an
   * IdemResponse, 2xx or 3xx, first answer or replay) and rejects with an
   * IdemError otherwise; error.key is the key to send it again with.
   */
  async request(url, init = {}) {
    const method = (init.method || 'POST').toUpperCase()
    const headers = new Headers(init.headers)
    let body = init.body ?? null
    if (body !== null && typeof body !== 'string') {
      if (typeof body !== 'object' || body instanceof ArrayBuffer || ArrayBuffer.isView(body) ||
          (typeof Blob !== 'undefined' && body instanceof Blob) ||
          (typeof FormData !== 'undefined' && body instanceof FormData)) {
        throw new TypeError('@idem-dev/client: body must be a string or a JSON value, so that the outbox can store it')
      }
      body = JSON.stringify(body)
      if (!headers.has('content-type')) headers.set('content-type', 'application/json')
    }
    const full = this.#url(url)
    if (SAFE_METHODS.has(method)) {
      const res = await this.fetch(full, { method, headers, signal: init.signal })
      const text = await res.text()
      return new IdemResponse({ url: full, status: res.status, statusText: res.statusText, headers: res.headers, text, key: '', attempts: 1 })
    }
    const key = init.key || headers.get('idempotency-key') || this.newKey()
    headers.set('idempotency-key', key)
    const entry = {
      key,
      method,
      url: full,
      scope: await this.scope(headers),
      headers: [...headers].filter(([k]) => !this.secretHeaders.includes(k.toLowerCase())),
      body,
      created: this.now(),
    }
    entry.id = await entryId(entry)
    // Store the key before the request: if the app dies now, retryPending
    // sends it again with the same key.
    await this.outbox.put(entry)
    return this.#lock(entry.id, true, () =>
      this.#send(entry, { headers, signal: init.signal, maxAttempts: init.maxAttempts ?? this.maxAttempts }))
  }

  // #lock runs fn as the only sender of entry id in this realm, and across
  // tabs (navigator.locks) or processes (the outbox's claim), waiting for it
  // or, without wait, returning SKIPPED when someone else holds it.
  async #lock(id, wait, fn) {
    const release = await localLock(this.outbox, id, wait)
    if (!release) return SKIPPED
    try {
      const locks = globalThis.navigator && globalThis.navigator.locks
      if (locks && typeof locks.request === 'function') {
        return await locks.request('idem-outbox:' + id, wait ? {} : { ifAvailable: true }, lock => (lock ? fn() : SKIPPED))
      }
      if (typeof this.outbox.claim === 'function') {
        let token
        for (;;) {
          token = await this.outbox.claim(id)
          if (token || !wait) break
          await sleep(50)
        }
        if (!token) return SKIPPED
        try {
          return await fn()
        } finally {
          await this.outbox.release(id, token)
        }
      }
      return await fn()
    } finally {
      release()
    }
  }

  async #send(entry, { headers, signal, maxAttempts, fromOutbox = false }) {
    let last = null
    let mayHaveRun = fromOutbox // a stored entry may have been sent before a crash
    for (let attempt = 1; ; attempt++) {
      const fields = { key: entry.key, entry, attempts: attempt - 1 }
      if (this.now() - entry.created > this.giveUpAfter) {
        await this.outbox.delete(entry.id)
        throw new IdemError('expired', `request ${entry.method} ${entry.url} (key ${entry.key}) is older than ${this.giveUpAfter} ms; dropped unsent`, { ...fields, mayHaveRun })
      }
      let h = headers
      if (!h) {
        h = new Headers(entry.headers)
        if (this.authorize) await this.authorize(h, entry)
      }
      h.set('idempotency-key', entry.key)
      if (this.onAttempt) this.onAttempt(entry, attempt)
      let res, text
      try {
        res = await this.fetch(entry.url, { method: entry.method, headers: h, body: entry.body ?? undefined, signal })
        text = await res.text()
      } catch (err) {
        if (signal && signal.aborted) {
          throw new IdemError('aborted', `request ${entry.method} ${entry.url} (key ${entry.key}) aborted; it stays pending`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
        }
        res = null
        mayHaveRun = true
        last = { code: 'gave_up', cause: err }
        if (fromOutbox && unreachable(err)) {
          throw new IdemError('offline', `server unreachable for ${entry.method} ${entry.url} (key ${entry.key})`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
        }
      }
      let wait = 0
      if (res) {
        mayHaveRun = true
        const { verdict, kind } = classify(res.status, res.headers, text)
        const response = new IdemResponse({ url: entry.url, status: res.status, statusText: res.statusText, headers: res.headers, text, key: entry.key, attempts: attempt })
        const f = { ...fields, attempts: attempt, kind, status: res.status, body: response.json() ?? text, response, mayHaveRun }
        if (verdict === 'final') {
          await this.outbox.delete(entry.id)
          if (response.ok || (res.status >= 300 && res.status < 400)) return response
          throw new IdemError('failed', `${entry.method} ${entry.url} (key ${entry.key}): status ${res.status}`, f)
        }
        if (verdict === 'conflict') {
          await this.outbox.delete(entry.id)
          throw new IdemError('conflict', `${entry.method} ${entry.url} (key ${entry.key}): status ${res.status} ${kind}: the key belongs to an earlier request; it ran, do not resend with a new key`, f)
        }
        last = { code: verdict === 'running' ? 'in_progress' : 'gave_up', fields: f }
        wait = Math.min(retryAfterMs(res.headers.get('retry-after'), this.now()), this.maxRetryAfter)
      }
      if (attempt >= maxAttempts) {
        throw new IdemError(last.code, `${entry.method} ${entry.url} (key ${entry.key}): no outcome after ${attempt} attempt(s) (${last.code}); it stays pending`,
          { ...fields, attempts: attempt, mayHaveRun, ...(last.fields || {}), cause: last.cause })
      }
      try {
        await sleep(wait > 0 ? wait : this.backoff(attempt), signal)
      } catch (err) {
        throw new IdemError('aborted', `request ${entry.method} ${entry.url} (key ${entry.key}) aborted; it stays pending`, { ...fields, attempts: attempt, mayHaveRun, cause: err })
      }
    }
  }

  /**
   * retryPending sends the outbox's entries again, each with its key: on
   * start-up, or when the network returns. At most `concurrency` at once,
   * each up to `pendingAttempts` times; when the server is unreachable it
   * stops and leaves the rest pending. Safe to call concurrently, from
   * several tabs (navigator.locks) or processes (FileOutbox): one sender per
   * entry; the others report it as 'busy'. Resolves with one result per
   * entry, oldest first: { entry, status, response?, error? } where status is
   * 'sent' (response is its outcome), 'busy', 'gone' (finished by another
   * sender meanwhile) or the IdemError's code.
   */
  async retryPending(options = {}) {
    const signal = options.signal
    const concurrency = Math.max(1, options.concurrency ?? this.concurrency)
    const maxAttempts = options.maxAttempts ?? this.pendingAttempts
    const entries = (await this.outbox.list()).sort((a, b) => a.created - b.created)
    const results = new Array(entries.length)
    let offline = false
    let next = 0
    const worker = async () => {
      while (next < entries.length) {
        const i = next++
        const entry = entries[i]
        if (offline) {
          results[i] = { entry, status: 'offline', error: new IdemError('offline', 'server unreachable; not sent', { key: entry.key, entry }) }
          continue
        }
        const r = await this.#lock(entry.id, false, async () => {
          // Re-read it: another sender may have finished it since list().
          const cur = await this.outbox.get(entry.id)
          if (!cur) return { entry, status: 'gone' }
          try {
            const response = await this.#send(cur, { signal, maxAttempts, fromOutbox: true })
            return { entry: cur, status: 'sent', response }
          } catch (error) {
            if (!(error instanceof IdemError)) throw error
            if (error.code === 'offline') offline = true
            return { entry: cur, status: error.code, error, response: error.response }
          }
        })
        results[i] = r === SKIPPED ? { entry, status: 'busy' } : r
      }
    }
    await Promise.all(Array.from({ length: Math.min(concurrency, entries.length) }, worker))
    return results
  }
}

/** MemoryOutbox keeps entries in memory: for tests and for apps that accept losing them on exit. */
export class MemoryOutbox {
  #m = new Map()
  async put(e) {
    this.#m.set(e.id, JSON.stringify(e))
  }
  async get(id) {
    const e = this.#m.get(id)
    return e === undefined ? undefined : JSON.parse(e)
  }
  async delete(id) {
    this.#m.delete(id)
  }
  async list() {
    return [...this.#m.values()].map(e => JSON.parse(e))
  }
}

/** LocalStorageOutbox keeps entries in a Storage (localStorage), one item each. */
export class LocalStorageOutbox {
  constructor(storage = globalThis.localStorage, prefix = 'idem-outbox:') {
    this.storage = storage
    this.prefix = prefix
  }
  async put(e) {
    this.storage.setItem(this.prefix + e.id, JSON.stringify(e))
  }
  async get(id) {
    const v = this.storage.getItem(this.prefix + id)
    return v === null ? undefined : JSON.parse(v)
  }
  async delete(id) {
    this.storage.removeItem(this.prefix + id)
  }
  async list() {
    const out = []
    for (let i = 0; i < this.storage.length; i++) {
      const k = this.storage.key(i)
      if (k && k.startsWith(this.prefix)) {
        const v = parseJSON(this.storage.getItem(k))
        if (v) out.push(v)
      }
    }
    return out
  }
}

/**
 * AsyncStorageOutbox keeps entries in React Native's AsyncStorage (or
 * anything with its getItem, setItem, removeItem and getAllKeys).
 */
export class AsyncStorageOutbox {
  constructor(storage, prefix = 'idem-outbox:') {
    this.storage = storage
    this.prefix = prefix
  }
  async put(e) {
    await this.storage.setItem(this.prefix + e.id, JSON.stringify(e))
  }
  async get(id) {
    const v = await this.storage.getItem(this.prefix + id)
    return v == null ? undefined : JSON.parse(v)
  }
  async delete(id) {
    await this.storage.removeItem(this.prefix + id)
  }
  async list() {
    const keys = (await this.storage.getAllKeys()).filter(k => k.startsWith(this.prefix))
    let pairs
    if (typeof this.storage.multiGet === 'function') pairs = await this.storage.multiGet(keys)
    else pairs = await Promise.all(keys.map(async k => [k, await this.storage.getItem(k)]))
    return pairs.map(([, v]) => parseJSON(v)).filter(Boolean)
  }
}

function idbRequest(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result)
    req.onerror = () => reject(req.error)
  })
}

/** IndexedDBOutbox keeps entries in an IndexedDB object store (browsers). */
export class IndexedDBOutbox {
  constructor({ name = 'idem-outbox', store = 'pending', indexedDB = globalThis.indexedDB } = {}) {
    this.name = name
    this.storeName = store
    this.idb = indexedDB
    this.db = null
  }
  async #open() {
    if (!this.db) {
      const req = this.idb.open(this.name, 1)
      req.onupgradeneeded = () => req.result.createObjectStore(this.storeName, { keyPath: 'id' })
      this.db = idbRequest(req)
    }
    return this.db
  }
  async #tx(mode, fn) {
    const db = await this.#open()
    // durability 'strict': the write is on disk when put resolves, as the
    // outbox promises ("stored before the first byte is sent").
    const tx = db.transaction(this.storeName, mode, { durability: 'strict' })
    const result = fn(tx.objectStore(this.storeName))
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve
      tx.onerror = () => reject(tx.error)
      tx.onabort = () => reject(tx.error)
    })
    return result ? result.result : undefined
  }
  async put(e) {
    await this.#tx('readwrite', s => s.put(e))
  }
  async get(id) {
    return this.#tx('readonly', s => s.get(id))
  }
  async delete(id) {
    await this.#tx('readwrite', s => s.delete(id))
  }
  async list() {
    return (await this.#tx('readonly', s => s.getAll())) || []
  }
  close() {
    if (this.db) this.db.then(db => db.close())
    this.db = null
  }
}
