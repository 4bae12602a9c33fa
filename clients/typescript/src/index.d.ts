// Type declarations for @idem-dev/client (written by hand; the package ships
// plain ESM JavaScript).

/** A request waiting in the outbox for its outcome. */
export interface PendingEntry {
  /** Digest of scope, method, URL and key: the entry's identity. */
  id: string
  key: string
  method: string
  /** Absolute URL. */
  url: string
  /** Tells apart users that may share a key (see IdemClientOptions.scope). */
  scope: string
  /** Request headers, without the secret ones. */
  headers: [string, string][]
  body: string | null
  /** When the logical request was made (ms since the epoch). */
  created: number
}

/** Where pending requests wait. All methods may be async. */
export interface Outbox {
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
  /** Optional cross-process lock (FileOutbox): a token, or null when held by another sender. */
  claim?(id: string): Promise<string | null>
  release?(id: string, token: string): Promise<void>
}

export type IdemErrorCode = 'conflict' | 'failed' | 'in_progress' | 'gave_up' | 'offline' | 'expired' | 'aborted'

/** Every failure of the client. */
export class IdemError extends Error {
  name: 'IdemError'
  /**
   * conflict: the key belongs to an earlier request (payload_mismatch, key_reused,
   * DUPLICATE_OPERATION, previous_failure, response_not_stored, outcome_unknown); it ran, do not
   * resend with a new key. failed: a final non-2xx answer (in `response`).
   * in_progress / gave_up / offline / aborted: no outcome yet, the entry stays
   * pending. expired: older than giveUpAfter, dropped unsent.
   */
  code: IdemErrorCode
  /** The idempotency key: send the request again with it. */
  key: string | undefined
  /** The problem the server named (in_progress, payload_mismatch, ...), or ''. */
  kind: string
  /** The last answer's status, 0 when there was none. */
  status: number
  /** The last answer's body, parsed when JSON. */
  body: unknown
  response: IdemResponse | undefined
  entry: PendingEntry | undefined
  attempts: number
  /** False only when no attempt was made. */
  mayHaveRun: boolean
  /** Whether the request is still in the outbox. */
  readonly pending: boolean
}

/** An outcome, read into memory. */
export class IdemResponse {
  readonly url: string
  readonly status: number
  readonly statusText: string
  readonly headers: Headers
  readonly text: string
  readonly key: string
  readonly attempts: number
  /** Answered from the server's record (Idempotent-Replayed, X-Idempotency-Cached, "idempotency_replayed"). */
  readonly replayed: boolean
  readonly ok: boolean
  json<T = any>(): T | undefined
}

export interface IdemClientOptions {
  /** Default: a MemoryOutbox. */
  outbox?: Outbox
  /** Default: globalThis.fetch. */
  fetch?: typeof fetch
  /** Resolves relative URLs; default location.href in browsers. */
  baseURL?: string
  /** Default: crypto.randomUUID(). */
  newKey?: () => string
  /** Default: a digest of Authorization, Cookie, X-User-ID, X-Organization-ID ('' when none). */
  scope?: (headers: Headers) => string | Promise<string>
  /** Left out of the outbox. Default: authorization, proxy-authorization, cookie, x-api-key. */
  secretHeaders?: string[]
  /** Puts credentials back before an entry is sent from the outbox. */
  authorize?: (headers: Headers, entry: PendingEntry) => void | Promise<void>
  /** Attempts per request() call. Default: Infinity (until giveUpAfter). */
  maxAttempts?: number
  /** Age after which a logical request is given up, ms. Default: 24 h. */
  giveUpAfter?: number
  /** Wait before attempt n+1 without Retry-After, ms. Default: 250 ms doubling to 30 s, jittered. */
  backoff?: (attempt: number) => number
  /** Cap on Retry-After, ms. Default: 60 s. */
  maxRetryAfter?: number
  now?: () => number
  /** retryPending's parallelism. Default: 4. */
  concurrency?: number
  /** retryPending's attempts per entry. Default: 3. */
  pendingAttempts?: number
  /** Called before every attempt. */
  onAttempt?: (entry: PendingEntry, attempt: number) => void
}

export interface RequestInit {
  method?: string
  headers?: HeadersInit
  /** A string, or a JSON value (sent as application/json). */
  body?: string | object | null
  /** The key of this logical request; default: Idempotency-Key header, else newKey(). */
  key?: string
  signal?: AbortSignal
  maxAttempts?: number
}

export type PendingStatus = 'sent' | 'busy' | 'gone' | IdemErrorCode

export interface PendingResult {
  entry: PendingEntry
  status: PendingStatus
  response?: IdemResponse
  error?: IdemError
}

export class IdemClient {
  constructor(options?: IdemClientOptions)
  readonly outbox: Outbox
  /** Resolves with the outcome (2xx/3xx, first answer or replay); rejects with an IdemError. */
  request(url: string | URL, init?: RequestInit): Promise<IdemResponse>
  /** Sends the outbox again (start-up, network back). One sender per entry across tabs and processes. */
  retryPending(options?: { signal?: AbortSignal; concurrency?: number; maxAttempts?: number }): Promise<PendingResult[]>
}

export class MemoryOutbox implements Outbox {
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
}

export class LocalStorageOutbox implements Outbox {
  constructor(storage?: Storage, prefix?: string)
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
}

/** React Native's AsyncStorage, or anything shaped like it. */
export interface AsyncStorageLike {
  getItem(key: string): Promise<string | null>
  setItem(key: string, value: string): Promise<void>
  removeItem(key: string): Promise<void>
  getAllKeys(): Promise<readonly string[]>
  multiGet?(keys: readonly string[]): Promise<readonly (readonly [string, string | null])[]>
}

export class AsyncStorageOutbox implements Outbox {
  constructor(storage: AsyncStorageLike, prefix?: string)
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
}

export class IndexedDBOutbox implements Outbox {
  constructor(options?: { name?: string; store?: string; indexedDB?: IDBFactory })
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
  close(): void
}

export const DEFAULT_SECRET_HEADERS: string[]
export const DEFAULT_SCOPE_HEADERS: string[]
export const CONFLICT_KINDS: Set<string>
export const DAY: number
export function problemKind(headers: Headers, body: string | object): string
export function classify(status: number, headers: Headers, text: string): { verdict: 'final' | 'retry' | 'running' | 'conflict'; kind: string }
export function replayed(headers: Headers, json?: unknown): boolean
export function retryAfterMs(value: string | null, now?: number): number
export function digest(s: string): Promise<string>
export function defaultScope(headers: Headers): Promise<string>
export function entryId(entry: Omit<PendingEntry, 'id' | 'headers' | 'body' | 'created'>): Promise<string>
