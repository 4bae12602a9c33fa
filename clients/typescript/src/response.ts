// Reading a server's answer: which idempotency problem it names, whether it
// is a replay, whether to retry it, and until when the server keeps its key.

/**
 * idem's answers that bind the key to an earlier request: the first request
 * ran (or was tried), so a new key would run the operation again.
 */
export const CONFLICT_KINDS: ReadonlySet<string> = new Set([
  'payload_mismatch', 'key_reused', 'previous_failure', 'response_not_stored', 'outcome_unknown',
])

// The mobile app's error codes, in its {"success":false,"error":{...}} shape.
const MOBILE_CODES: Readonly<Record<string, string>> = {
  OPERATION_IN_PROGRESS: 'in_progress',
  DUPLICATE_OPERATION: 'payload_mismatch',
  PREVIOUS_OPERATION_FAILED: 'previous_failure',
  RESPONSE_NOT_STORED: 'response_not_stored',
  OUTCOME_UNKNOWN: 'outcome_unknown',
}

/** The header a server names the end of a key's life in (an HTTP-date). */
export const KEY_EXPIRES_HEADER = 'idempotency-key-expires'

/** What a response carries that these functions read: its headers' get. */
export interface HeadersLike {
  get(name: string): string | null
}

export function parseJSON(text: string | null | undefined): unknown {
  if (!text) return undefined
  try {
    return JSON.parse(text) as unknown
  } catch {
    return undefined
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * problemKind returns the kind of idempotency problem an answer names, or ''.
 * It reads every shape the gateway writes and Stripe's: problem+json's
 * conflict_type or the fragment of its type URI; the mobile app's
 * error.details.conflictType or error.code; Stripe's error.type
 * "idempotency_error" (in_progress when its message says a request is still
 * in progress, payload_mismatch otherwise). body is the answer's text or its
 * parsed JSON.
 */
export function problemKind(headers: HeadersLike, body: unknown): string {
  const ct = (headers.get('content-type') || '').toLowerCase()
  if (ct && !ct.includes('json')) return ''
  const doc = typeof body === 'string' ? parseJSON(body) : body
  if (!isObject(doc)) return ''
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
  if (isObject(e)) {
    const details = e.details
    if (isObject(details) && typeof details.conflictType === 'string' && details.conflictType) return details.conflictType
    if (typeof e.code === 'string' && Object.hasOwn(MOBILE_CODES, e.code)) return MOBILE_CODES[e.code] as string
    if (e.type === 'idempotency_error') {
      const m = String(e.message ?? '').toLowerCase()
      return m.includes('in progress') || m.includes('in-progress') ? 'in_progress' : 'payload_mismatch'
    }
  }
  return ''
}

/** replayed reports whether an answer came from the server's record. */
export function replayed(headers: HeadersLike, json?: unknown): boolean {
  return (
    headers.get('idempotent-replayed') === 'true' ||
    headers.get('x-idempotency-cached') === 'true' ||
    (isObject(json) && json.idempotency_replayed === true)
  )
}

export type Verdict = 'final' | 'retry' | 'running' | 'conflict'

/**
 * idem's answers that nothing ran, or that no outcome was recorded yet:
 * sent again with the same key, whatever their status (a 400
 * unreadable_body included).
 */
export const RETRY_KINDS: ReadonlySet<string> = new Set([
  'unreadable_body', 'body_timeout', 'store_unavailable', 'outcome_not_recorded', 'upstream_unavailable', 'upstream_timeout',
])

/**
 * classify says what an answer means, by the one rule every idem client
 * follows (docs/problems.md, "How a client retries"; the vectors in
 * clients/testdata/retry.json, which the Go client passes too): 'final'
 * (the outcome), 'conflict' (final: the key is bound to an earlier request),
 * 'running' (in_progress: waited out) or 'retry' (nothing ran or no outcome
 * yet). A replay is always final; then idem's named problems decide; then
 * the status: 408, 429 and every 5xx but 501 and 505 are retried with the
 * key; a 409 without a name is in_progress when it carries Retry-After
 * (idem's does) and otherwise the API's own stored answer.
 */
export function classify(status: number, headers: HeadersLike, text: string): { verdict: Verdict; kind: string } {
  const json = parseJSON(text)
  if (replayed(headers, json)) return { verdict: 'final', kind: '' }
  const kind = problemKind(headers, json)
  if (kind === 'in_progress') return { verdict: 'running', kind }
  if (CONFLICT_KINDS.has(kind)) return { verdict: 'conflict', kind }
  if (RETRY_KINDS.has(kind)) return { verdict: 'retry', kind }
  if (status === 409 && headers.get('retry-after')) return { verdict: 'running', kind: 'in_progress' }
  if (status === 408 || status === 429 || (status >= 500 && status !== 501 && status !== 505)) {
    return { verdict: 'retry', kind }
  }
  return { verdict: 'final', kind }
}

/** retryAfterMs parses Retry-After (seconds or an HTTP date); 0 when absent. */
export function retryAfterMs(value: string | null | undefined, now: number = Date.now()): number {
  if (!value) return 0
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000
  const t = Date.parse(value)
  return Number.isNaN(t) ? 0 : Math.max(0, t - now)
}

function parseDate(s: unknown): Date | undefined {
  if (typeof s !== 'string' || !s.trim()) return undefined
  // RFC 3339 allows a lower-case "t" and "z"; Date.parse wants them upper.
  const t = Date.parse(/^\d{4}-\d\d-\d\d[tT ]/.test(s) ? s.toUpperCase() : s)
  return Number.isNaN(t) ? undefined : new Date(t)
}

/**
 * keyExpiresAt reads until when the server keeps the answer's key: the
 * Idempotency-Key-Expires header (an HTTP-date), else the key_expires_at
 * member of a JSON problem (RFC 3339). undefined when the answer says
 * neither. First answers, replays and 409 answers carry it.
 */
export function keyExpiresAt(headers: HeadersLike, body: unknown): Date | undefined {
  const fromHeader = parseDate(headers.get(KEY_EXPIRES_HEADER))
  if (fromHeader) return fromHeader
  const doc = typeof body === 'string' ? parseJSON(body) : body
  return isObject(doc) ? parseDate(doc.key_expires_at) : undefined
}

/** What an IdemResponse is made of. */
export interface IdemResponseInit {
  /** The absolute URL the request went to. */
  url: string
  status: number
  statusText?: string
  headers: Headers
  /** The body, read whole. */
  text: string
  /** The idempotency key it was sent with; '' for a request without one. */
  key?: string
  /** Attempts it took. Default: 1. */
  attempts?: number
}

/** The outcome of a request: its answer, read into memory. */
export class IdemResponse {
  readonly url: string
  readonly status: number
  readonly statusText: string
  readonly headers: Headers
  readonly text: string
  /** The idempotency key; '' for a request sent without one (GET). */
  readonly key: string
  readonly attempts: number
  /** Answered from the server's record (Idempotent-Replayed, X-Idempotency-Cached, "idempotency_replayed"). */
  readonly replayed: boolean
  /**
   * Until when the server keeps the key (Idempotency-Key-Expires or the
   * problem's key_expires_at); undefined when it did not say. After that a
   * request with the key runs as a new one.
   */
  readonly keyExpiresAt: Date | undefined

  constructor(init: IdemResponseInit) {
    this.url = init.url
    this.status = init.status
    this.statusText = init.statusText ?? ''
    this.headers = init.headers
    this.text = init.text
    this.key = init.key ?? ''
    this.attempts = init.attempts ?? 1
    const json = parseJSON(init.text)
    this.replayed = replayed(init.headers, json)
    this.keyExpiresAt = keyExpiresAt(init.headers, json)
  }

  get ok(): boolean {
    return this.status >= 200 && this.status < 300
  }

  /** The body parsed as JSON (undefined when it is not JSON). */
  json<T = unknown>(): T | undefined {
    return parseJSON(this.text) as T | undefined
  }
}
