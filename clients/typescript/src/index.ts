// @idem-dev/client: safe retries for mutating HTTP calls. One idempotency key
// per user intent, stored in an outbox before the first byte is sent, sent
// again with the same key and body until the server gives an outcome, each
// outcome handed to the app before its entry leaves the outbox, and the error
// shapes of every idem gateway profile (ietf, stripe, mobile, workflow-admin)
// read into one typed error. No runtime dependencies: fetch,
// crypto.randomUUID and (when present) crypto.subtle and navigator.locks.
// Runs in browsers, React Native and Node; the Node file outbox is
// @idem-dev/client/file.

export {
  IdemClient, DEFAULT_SECRET_HEADERS, DEFAULT_SCOPE_HEADERS, DAY, digest, defaultScope, entryId,
  type IdemClientOptions, type IdemRequestInit, type HeadersInput, type FetchLike, type Outcome, type FinalStatus,
  type OutcomeHandler, type PendingResult, type PendingStatus, type RetryPendingOptions,
} from './client.js'
export { IdemError, type IdemErrorCode, type IdemErrorFields } from './errors.js'
export {
  IdemResponse, CONFLICT_KINDS, RETRY_KINDS, KEY_EXPIRES_HEADER, problemKind, replayed, classify, retryAfterMs, keyExpiresAt,
  type IdemResponseInit, type HeadersLike, type Verdict,
} from './response.js'
export type { IdemBody, JsonBody } from './body.js'
export {
  MemoryOutbox, LocalStorageOutbox, AsyncStorageOutbox, IndexedDBOutbox,
  type Outbox, type PendingEntry, type IdemFetchOptions, type StorageLike, type AsyncStorageLike,
  type IDBFactoryLike, type IDBOpenRequestLike, type IDBDatabaseLike, type IDBTransactionLike, type IDBObjectStoreLike, type IDBRequestLike,
} from './outbox.js'
