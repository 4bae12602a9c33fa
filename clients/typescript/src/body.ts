// Request bodies as the outbox keeps them: text as is, anything else read
// whole into bytes (base64 in the entry), so that every attempt, in this
// process or after a restart, sends the same bytes.

/**
 * What request() sends. Text, bytes, a Blob, FormData or URLSearchParams go
 * as fetch would send them (read whole into the outbox first; FormData with
 * the multipart boundary fetch would give it); any other value is sent as
 * JSON (application/json). Map, Set, functions, promises and Node streams
 * are refused with a TypeError, since JSON would lose them.
 */
export type IdemBody = string | ArrayBuffer | ArrayBufferView | Blob | FormData | URLSearchParams | JsonBody

/** A value sent as JSON: a plain object, an array, a number or a boolean. */
export type JsonBody = object | number | boolean

/** A body as stored: text, or bytes in base64 when binary is true. */
export interface StoredBody {
  body: string | null
  binary?: true
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'

// base64 by hand: btoa and Buffer are not on every platform (older React
// Native), and the outbox must read back what any of them wrote.
export function toBase64(bytes: Uint8Array): string {
  let out = ''
  let i = 0
  for (; i + 2 < bytes.length; i += 3) {
    const n = ((bytes[i] as number) << 16) | ((bytes[i + 1] as number) << 8) | (bytes[i + 2] as number)
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!
  }
  if (i < bytes.length) {
    const n = ((bytes[i] as number) << 16) | (i + 1 < bytes.length ? (bytes[i + 1] as number) << 8 : 0)
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + (i + 1 < bytes.length ? B64[(n >> 6) & 63]! : '=') + '='
  }
  return out
}

export function fromBase64(s: string): Uint8Array {
  const clean = s.replace(/=+$/, '')
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4))
  let bits = 0
  let acc = 0
  let j = 0
  for (const c of clean) {
    const v = B64.indexOf(c)
    if (v < 0) throw new TypeError('@idem-dev/client: an outbox entry holds a body that is not base64')
    acc = (acc << 6) | v
    bits += 6
    if (bits >= 8) {
      bits -= 8
      out[j++] = (acc >> bits) & 0xff
    }
  }
  return out.subarray(0, j)
}

function has(name: string): boolean {
  return typeof (globalThis as Record<string, unknown>)[name] === 'function'
}

function isInstance(v: object, name: string): boolean {
  return has(name) && v instanceof ((globalThis as Record<string, unknown>)[name] as abstract new (...a: never[]) => unknown)
}

function refused(what: string): TypeError {
  return new TypeError(`@idem-dev/client: body is ${what}, which the outbox cannot keep as sent; pass a string, bytes, a Blob, FormData, URLSearchParams, or a plain object or array (sent as JSON)`)
}

/**
 * encodeBody reads a request body into its stored form, and sets
 * Content-Type where fetch would (the caller's own wins).
 */
export async function encodeBody(body: IdemBody | null | undefined, headers: Headers): Promise<StoredBody> {
  if (body === null || body === undefined) return { body: null }
  if (typeof body === 'string') return { body }
  if (typeof body === 'number' || typeof body === 'boolean') return json(body, headers)
  if (typeof body !== 'object') throw refused(`a ${typeof body}`)
  if (body instanceof URLSearchParams) {
    if (!headers.has('content-type')) headers.set('content-type', 'application/x-www-form-urlencoded;charset=UTF-8')
    return { body: body.toString() }
  }
  if (body instanceof ArrayBuffer) return { body: toBase64(new Uint8Array(body)), binary: true }
  if (ArrayBuffer.isView(body)) return { body: toBase64(new Uint8Array(body.buffer, body.byteOffset, body.byteLength)), binary: true }
  if (isInstance(body, 'Blob') || isInstance(body, 'FormData') || isInstance(body, 'ReadableStream')) {
    // fetch's own reading of the body, Content-Type included (a Blob's type,
    // FormData's multipart boundary).
    let bytes: ArrayBuffer
    let type: string | null
    try {
      const r = new Response(body as Blob)
      type = r.headers.get('content-type')
      bytes = await r.arrayBuffer()
    } catch (err) {
      throw new TypeError(`@idem-dev/client: could not read the body into the outbox on this platform (${String(err)}); pass its bytes or a string`, { cause: err })
    }
    if (type && !headers.has('content-type')) headers.set('content-type', type)
    return { body: toBase64(new Uint8Array(bytes)), binary: true }
  }
  if (body instanceof Map || body instanceof Set || body instanceof WeakMap || body instanceof WeakSet) throw refused(`a ${body.constructor.name}`)
  if (body instanceof Promise) throw refused('a Promise (await it first)')
  if (typeof (body as { pipe?: unknown }).pipe === 'function' || Symbol.asyncIterator in body) throw refused('a stream (read it into bytes first)')
  return json(body, headers)
}

function json(value: unknown, headers: Headers): StoredBody {
  const text = JSON.stringify(value)
  if (text === undefined) throw refused('not JSON')
  if (!headers.has('content-type')) headers.set('content-type', 'application/json')
  return { body: text }
}

/** decodeBody gives fetch what an entry stores. */
export function decodeBody(e: StoredBody): string | Uint8Array | undefined {
  if (e.body === null || e.body === undefined) return undefined
  return e.binary ? fromBase64(e.body) : e.body
}
