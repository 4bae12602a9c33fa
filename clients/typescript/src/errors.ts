import type { IdemResponse } from './response.js'
import type { PendingEntry } from './outbox.js'

/**
 * What happened, for every failure of the client:
 * - 'conflict': the server bound the key to another request (payload_mismatch,
 *   key_reused, the mobile app's 409 DUPLICATE_OPERATION, previous_failure,
 *   response_not_stored, outcome_unknown). The first request ran: do not
 *   resend with a new key.
 * - 'failed': a final answer that is not a success (400, 401, 404, 422 from
 *   the API, the API's own 409...); `response` holds it.
 * - 'in_progress': the first request with the key still runs; the entry stays
 *   in the outbox (retryPending will fetch its outcome).
 * - 'gave_up': no outcome after the last attempt (network errors, 5xx, 429);
 *   the entry stays in the outbox.
 * - 'network': the request failed in the network with no answer (`cause` is
 *   fetch's error): an unkeyed request (GET), or an entry whose answer
 *   retryPending lost; a keyed entry stays in the outbox.
 * - 'offline': retryPending did not send the entry, the network is down or
 *   the server unreachable; the entry stays.
 * - 'expired': the key can no longer be replayed: older than giveUpAfter
 *   (24 h), or past the expiry the server announced (keyExpiresAt). Dropped
 *   unsent, since a new attempt could run the request again.
 * - 'aborted': the caller's signal; a keyed entry stays in the outbox.
 */
export type IdemErrorCode = 'conflict' | 'failed' | 'in_progress' | 'gave_up' | 'network' | 'offline' | 'expired' | 'aborted'

const CODES: ReadonlySet<string> = new Set<IdemErrorCode>(['conflict', 'failed', 'in_progress', 'gave_up', 'network', 'offline', 'expired', 'aborted'])
const PENDING: ReadonlySet<string> = new Set<IdemErrorCode>(['in_progress', 'gave_up', 'network', 'offline', 'aborted'])

/** The details an IdemError carries; every one may be left out. */
export interface IdemErrorFields {
  /** The idempotency key; undefined for a request sent without one. */
  key?: string
  /** The problem the server named (in_progress, payload_mismatch, ...). Default ''. */
  kind?: string
  /** The last answer's status. Default 0 (no answer). */
  status?: number
  /** The last answer's body, parsed when JSON. */
  body?: unknown
  response?: IdemResponse
  entry?: PendingEntry
  /** Attempts made. Default 0. */
  attempts?: number
  /** Whether the request may have reached the server. Default true. */
  mayHaveRun?: boolean
  /** Until when the server keeps the key, when it said. */
  keyExpiresAt?: Date
  /** The underlying error (fetch's TypeError, the signal's reason). */
  cause?: unknown
}

/** Every failure of the client; `code` says which (see IdemErrorCode). */
export class IdemError extends Error {
  override name = 'IdemError' as const
  readonly code: IdemErrorCode
  /** The idempotency key: send the request again with it. */
  readonly key: string | undefined
  /** The problem the server named (in_progress, payload_mismatch, ...), or ''. */
  readonly kind: string
  /** The last answer's status, 0 when there was none. */
  readonly status: number
  /** The last answer's body, parsed when JSON. */
  readonly body: unknown
  readonly response: IdemResponse | undefined
  readonly entry: PendingEntry | undefined
  readonly attempts: number
  /**
   * False only when no attempt was made; a network error may come after the
   * server received the request, so it counts as "may have run".
   */
  readonly mayHaveRun: boolean
  /** Until when the server keeps the key (Idempotency-Key-Expires, key_expires_at), when it said. */
  readonly keyExpiresAt: Date | undefined

  /**
   * new IdemError('conflict', 'message', { key }). code must be one of
   * IdemErrorCode: anything else (new IdemError('message')) is a TypeError,
   * so that a message is never taken for a code.
   */
  constructor(code: IdemErrorCode, message: string, fields: IdemErrorFields = {}) {
    if (!CODES.has(code)) {
      throw new TypeError(`IdemError: code ${JSON.stringify(code)} is not one of ${[...CODES].join(', ')}; call new IdemError(code, message, fields)`)
    }
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause })
    this.code = code
    this.key = fields.key
    this.kind = fields.kind ?? ''
    this.status = fields.status ?? 0
    this.body = fields.body
    this.response = fields.response
    this.entry = fields.entry
    this.attempts = fields.attempts ?? 0
    this.mayHaveRun = fields.mayHaveRun ?? true
    this.keyExpiresAt = fields.keyExpiresAt ?? fields.response?.keyExpiresAt
  }

  /** Whether the request is still in the outbox, to be sent by retryPending. */
  get pending(): boolean {
    return this.key !== undefined && PENDING.has(this.code)
  }
}
