// Where pending requests wait: the Outbox interface and the adapters for
// memory, Web Storage, React Native's AsyncStorage and IndexedDB. The Node
// file outbox is outbox-file.ts, its own entry point (@idem-dev/client/file)
// so that browser bundles never see node:fs; outbox-file-unsupported.ts is
// what that entry point resolves to outside Node.

import { parseJSON } from './response.js'

/** fetch's options that an entry keeps and every attempt passes on. */
export interface IdemFetchOptions {
  credentials?: 'omit' | 'same-origin' | 'include'
  /** 'no-cors' is refused: its opaque answer hides the outcome. */
  mode?: 'cors' | 'same-origin'
  redirect?: 'follow' | 'error' | 'manual'
  keepalive?: boolean
  cache?: 'default' | 'no-store' | 'reload' | 'no-cache' | 'force-cache' | 'only-if-cached'
  referrer?: string
  referrerPolicy?: '' | 'no-referrer' | 'no-referrer-when-downgrade' | 'origin' | 'origin-when-cross-origin' | 'same-origin' | 'strict-origin' | 'strict-origin-when-cross-origin' | 'unsafe-url'
  integrity?: string
}

/** A request waiting in the outbox for its outcome (plain JSON). */
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
  /** The body as text, or base64 when binary is true; null for none. */
  body: string | null
  binary?: true
  /** fetch options passed on every attempt (credentials, mode, ...). */
  options?: IdemFetchOptions
  /** When the logical request was made (ms since the epoch, the client's clock). */
  created: number
  /** Until when the server said it keeps the key (RFC 3339, the server's clock). */
  keyExpiresAt?: string
  /** The same moment on the client's clock (ms): the entry is not sent after it. */
  keyExpires?: number
}

/** Where pending requests wait. */
export interface Outbox {
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
  /** Optional lock across processes (FileOutbox): a token, or null while another live sender holds the entry. */
  claim?(id: string): Promise<string | null>
  release?(id: string, token: string): Promise<void>
}

/** MemoryOutbox keeps entries in memory: for tests and for apps that accept losing them on exit. */
export class MemoryOutbox implements Outbox {
  #m = new Map<string, string>()
  async put(e: PendingEntry): Promise<void> {
    this.#m.set(e.id, JSON.stringify(e))
  }
  async get(id: string): Promise<PendingEntry | undefined> {
    const e = this.#m.get(id)
    return e === undefined ? undefined : (JSON.parse(e) as PendingEntry)
  }
  async delete(id: string): Promise<void> {
    this.#m.delete(id)
  }
  async list(): Promise<PendingEntry[]> {
    return [...this.#m.values()].map(e => JSON.parse(e) as PendingEntry)
  }
}

/** The Web Storage interface (localStorage, sessionStorage), or anything shaped like it. */
export interface StorageLike {
  readonly length: number
  key(index: number): string | null
  getItem(key: string): string | null
  setItem(key: string, value: string): void
  removeItem(key: string): void
}

/** LocalStorageOutbox keeps entries in a Storage (localStorage by default), one item each. */
export class LocalStorageOutbox implements Outbox {
  readonly storage: StorageLike
  readonly prefix: string
  constructor(storage?: StorageLike, prefix = 'idem-outbox:') {
    const s = storage ?? (globalThis as { localStorage?: StorageLike }).localStorage
    if (!s) throw new TypeError('LocalStorageOutbox: there is no localStorage here; pass a Storage')
    this.storage = s
    this.prefix = prefix
  }
  async put(e: PendingEntry): Promise<void> {
    this.storage.setItem(this.prefix + e.id, JSON.stringify(e))
  }
  async get(id: string): Promise<PendingEntry | undefined> {
    const v = this.storage.getItem(this.prefix + id)
    return v === null ? undefined : (JSON.parse(v) as PendingEntry)
  }
  async delete(id: string): Promise<void> {
    this.storage.removeItem(this.prefix + id)
  }
  async list(): Promise<PendingEntry[]> {
    const out: PendingEntry[] = []
    for (let i = 0; i < this.storage.length; i++) {
      const k = this.storage.key(i)
      if (k && k.startsWith(this.prefix)) {
        const v = parseJSON(this.storage.getItem(k)) as PendingEntry | undefined
        if (v) out.push(v)
      }
    }
    return out
  }
}

/** React Native's AsyncStorage, or anything shaped like it. */
export interface AsyncStorageLike {
  getItem(key: string): Promise<string | null>
  setItem(key: string, value: string): Promise<void>
  removeItem(key: string): Promise<void>
  getAllKeys(): Promise<readonly string[]>
  multiGet?(keys: readonly string[]): Promise<readonly (readonly [string, string | null])[]>
}

/** AsyncStorageOutbox keeps entries in React Native's AsyncStorage (or anything with its interface). */
export class AsyncStorageOutbox implements Outbox {
  readonly storage: AsyncStorageLike
  readonly prefix: string
  constructor(storage: AsyncStorageLike, prefix = 'idem-outbox:') {
    this.storage = storage
    this.prefix = prefix
  }
  async put(e: PendingEntry): Promise<void> {
    await this.storage.setItem(this.prefix + e.id, JSON.stringify(e))
  }
  async get(id: string): Promise<PendingEntry | undefined> {
    const v = await this.storage.getItem(this.prefix + id)
    return v == null ? undefined : (JSON.parse(v) as PendingEntry)
  }
  async delete(id: string): Promise<void> {
    await this.storage.removeItem(this.prefix + id)
  }
  async list(): Promise<PendingEntry[]> {
    const keys = (await this.storage.getAllKeys()).filter(k => k.startsWith(this.prefix))
    const pairs = typeof this.storage.multiGet === 'function'
      ? await this.storage.multiGet(keys)
      : await Promise.all(keys.map(async k => [k, await this.storage.getItem(k)] as const))
    return pairs.map(([, v]) => parseJSON(v) as PendingEntry | undefined).filter((v): v is PendingEntry => !!v)
  }
}

// The parts of IndexedDB the outbox uses, written out so that the
// declarations need no DOM library; the browser's indexedDB fits them.
type Handler = ((this: any, ev: any) => any) | null
export interface IDBRequestLike<T> {
  readonly result: T
  readonly error: unknown
  onsuccess: Handler
  onerror: Handler
}
export interface IDBObjectStoreLike {
  put(value: PendingEntry): IDBRequestLike<unknown>
  get(key: string): IDBRequestLike<unknown>
  delete(key: string): IDBRequestLike<unknown>
  getAll(): IDBRequestLike<unknown[]>
}
export interface IDBTransactionLike {
  readonly error: unknown
  objectStore(name: string): IDBObjectStoreLike
  oncomplete: Handler
  onerror: Handler
  onabort: Handler
}
export interface IDBDatabaseLike {
  createObjectStore(name: string, options: { keyPath: string }): unknown
  transaction(store: string, mode: 'readonly' | 'readwrite', options?: { durability?: 'default' | 'strict' | 'relaxed' }): IDBTransactionLike
  close(): void
}
export interface IDBOpenRequestLike extends IDBRequestLike<IDBDatabaseLike> {
  onupgradeneeded: Handler
}
/** window.indexedDB, or anything shaped like it. */
export interface IDBFactoryLike {
  open(name: string, version?: number): IDBOpenRequestLike
}

function idbRequest<T>(req: IDBRequestLike<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result)
    req.onerror = () => reject(req.error)
  })
}

/** IndexedDBOutbox keeps entries in an IndexedDB object store (browsers). */
export class IndexedDBOutbox implements Outbox {
  readonly name: string
  readonly storeName: string
  readonly idb: IDBFactoryLike
  #db: Promise<IDBDatabaseLike> | null = null

  constructor(options: { name?: string; store?: string; indexedDB?: IDBFactoryLike } = {}) {
    this.name = options.name ?? 'idem-outbox'
    this.storeName = options.store ?? 'pending'
    const idb = options.indexedDB ?? (globalThis as { indexedDB?: IDBFactoryLike }).indexedDB
    if (!idb) throw new TypeError('IndexedDBOutbox: there is no indexedDB here; pass options.indexedDB')
    this.idb = idb
  }

  #open(): Promise<IDBDatabaseLike> {
    if (!this.#db) {
      const req = this.idb.open(this.name, 1)
      req.onupgradeneeded = () => req.result.createObjectStore(this.storeName, { keyPath: 'id' })
      this.#db = idbRequest(req)
    }
    return this.#db
  }

  async #tx<T>(mode: 'readonly' | 'readwrite', fn: (s: IDBObjectStoreLike) => IDBRequestLike<T>): Promise<T> {
    const db = await this.#open()
    // durability 'strict': the write is on disk when put resolves, as the
    // outbox promises ("stored before the first byte is sent").
    const tx = db.transaction(this.storeName, mode, { durability: 'strict' })
    const req = fn(tx.objectStore(this.storeName))
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve
      tx.onerror = () => reject(tx.error)
      tx.onabort = () => reject(tx.error)
    })
    return req.result
  }

  async put(e: PendingEntry): Promise<void> {
    await this.#tx('readwrite', s => s.put(e))
  }
  async get(id: string): Promise<PendingEntry | undefined> {
    return (await this.#tx('readonly', s => s.get(id))) as PendingEntry | undefined
  }
  async delete(id: string): Promise<void> {
    await this.#tx('readwrite', s => s.delete(id))
  }
  async list(): Promise<PendingEntry[]> {
    return ((await this.#tx('readonly', s => s.getAll())) ?? []) as PendingEntry[]
  }
  close(): void {
    if (this.#db) void this.#db.then(db => db.close())
    this.#db = null
  }
}
