// FileOutbox: the outbox of a Node process, one JSON file per entry in a
// directory, written to a temporary file, synced and renamed, so that a
// crash (SIGKILL included) leaves either the whole entry or none of it; and
// a lock file per entry being sent, so that processes sharing the directory
// send each entry one at a time.
import type { Stats } from 'node:fs'
import { link, mkdir, open, readdir, readFile, rename, stat, unlink, copyFile, constants, type FileHandle } from 'node:fs/promises'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import type { Outbox, PendingEntry } from './index.js'

export interface FileOutboxOptions {
  /**
   * A lock not refreshed for this long is taken over whoever holds it (a
   * hung process, a reused pid, a holder on another host); holders refresh
   * theirs every third of it. ms, default 30 s.
   */
  staleAfter?: number
}

interface LockFile {
  pid: number
  host?: string
  token: string
  at: number
}

const HOST = hostname()

// The lock tokens this process holds, over every FileOutbox instance: a lock
// file naming this pid with a token not here was left by a killed process
// whose pid was reused.
const heldTokens = new Set<string>()

// Temporary and displaced files older than this are a killed writer's
// leftovers, removed by list().
const LEFTOVER_AGE = 10 * 60 * 1000

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code
}

async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined
  try {
    fh = await open(dir, 'r')
    await fh.sync()
  } catch {
    // Some file systems cannot sync a directory; the rename is then as
    // durable as they make it.
  } finally {
    await fh?.close()
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return errCode(err) === 'EPERM'
  }
}

function parseLock(text: string): LockFile | undefined {
  try {
    const v = JSON.parse(text) as Partial<LockFile> | null
    if (v && typeof v.pid === 'number' && typeof v.token === 'string') return v as LockFile
  } catch {
    // empty (its writer died between creating and writing it) or garbled
  }
  return undefined
}

function sameFile(a: Stats, b: Stats): boolean {
  return a.ino === b.ino && a.dev === b.dev && a.size === b.size && a.mtimeMs === b.mtimeMs
}

// Test hooks, set by the tests' child processes only: IDEM_FILEOUTBOX_TEST
// holds "no-link" (create lock files with open 'wx' and a write, as where
// hard links fail) and/or "pause-after-lock" (stop for ever right after the
// lock file exists, for the test to SIGKILL the process there).
function testHook(name: string): boolean {
  return (process.env.IDEM_FILEOUTBOX_TEST ?? '').split(',').includes(name)
}

async function pauseForTest(): Promise<void> {
  if (testHook('pause-after-lock')) {
    process.stdout.write('paused-after-lock\n')
    // A timer keeps the process alive until the test kills it.
    await new Promise(() => setInterval(() => {}, 60_000))
  }
}

const VALID_ID = /^[A-Za-z0-9_-]+$/

/**
 * FileOutbox keeps a Node process's pending requests in a directory: one
 * synced JSON file per entry, and a lock file per entry being sent.
 * Processes sharing the directory on one host (or on several, through a
 * shared file system) send each entry one at a time; a lock left by a killed
 * process is taken over.
 */
export class FileOutbox implements Outbox {
  readonly dir: string
  readonly #ready: Promise<unknown>
  readonly #staleAfter: number
  readonly #held = new Map<string, { fh: FileHandle; timer: ReturnType<typeof setInterval> }>()
  #linkWorks = true

  constructor(dir: string, options: FileOutboxOptions = {}) {
    this.dir = dir
    this.#staleAfter = options.staleAfter ?? 30_000
    if (!(this.#staleAfter > 0)) throw new TypeError(`FileOutbox: staleAfter must be a positive number of ms, not ${options.staleAfter}`)
    this.#ready = mkdir(dir, { recursive: true, mode: 0o700 })
    // Reported by the first call that awaits it, not as an unhandled rejection.
    this.#ready.catch(() => {})
  }

  #path(id: string, ext: string): string {
    if (!VALID_ID.test(id)) throw new TypeError(`FileOutbox: entry id ${JSON.stringify(id)} is not a digest (letters, digits, - and _)`)
    return join(this.dir, id + ext)
  }

  async put(e: PendingEntry): Promise<void> {
    await this.#ready
    const path = this.#path(e.id, '.json')
    const tmp = join(this.dir, `.tmp-${randomUUID()}`)
    const fh = await open(tmp, 'wx', 0o600)
    try {
      await fh.writeFile(JSON.stringify(e))
      await fh.sync()
    } finally {
      await fh.close()
    }
    await rename(tmp, path)
    await syncDir(this.dir)
  }

  async get(id: string): Promise<PendingEntry | undefined> {
    await this.#ready
    try {
      return JSON.parse(await readFile(this.#path(id, '.json'), 'utf8')) as PendingEntry
    } catch (err) {
      if (errCode(err) === 'ENOENT') return undefined
      throw err
    }
  }

  async delete(id: string): Promise<void> {
    await this.#ready
    try {
      await unlink(this.#path(id, '.json'))
    } catch (err) {
      if (errCode(err) !== 'ENOENT') throw err
    }
    await syncDir(this.dir)
  }

  async list(): Promise<PendingEntry[]> {
    await this.#ready
    const out: PendingEntry[] = []
    for (const name of await readdir(this.dir)) {
      const path = join(this.dir, name)
      if (name.startsWith('.tmp-') || name.startsWith('.stale-')) {
        try {
          if (Date.now() - (await stat(path)).mtimeMs > LEFTOVER_AGE) await unlink(path)
        } catch {
          // gone already
        }
        continue
      }
      if (!name.endsWith('.json')) continue
      try {
        out.push(JSON.parse(await readFile(path, 'utf8')) as PendingEntry)
      } catch (err) {
        if (errCode(err) !== 'ENOENT') throw err // deleted meanwhile
      }
    }
    return out
  }

  /**
   * claim makes this process the only sender of entry id: a lock file,
   * created with its content in one step (written to a temporary file, then
   * hard-linked into place). A lock is taken over when its holder is gone: a
   * process of this host that no longer runs, a lock not refreshed for
   * staleAfter, or an empty or garbled lock (a writer killed mid-write where
   * hard links fail) older than a short grace. A live holder keeps it
   * however long it retries. Resolves with a token for release, or null
   * while another live sender holds it.
   */
  async claim(id: string): Promise<string | null> {
    await this.#ready
    const path = this.#path(id, '.lock')
    for (let i = 0; i < 3; i++) {
      const token = await this.#create(path)
      if (token) return token
      const seen = await this.#inspect(path)
      if (!seen) continue // released meanwhile
      if (!this.#stale(seen.stats, seen.lock)) return null
      await this.#takeOver(path, seen.stats)
    }
    return null
  }

  async release(id: string, token: string): Promise<void> {
    heldTokens.delete(token)
    const held = this.#held.get(token)
    this.#held.delete(token)
    if (held) {
      clearInterval(held.timer)
      await held.fh.close().catch(() => {})
    }
    const path = this.#path(id, '.lock')
    try {
      if (parseLock(await readFile(path, 'utf8'))?.token === token) await unlink(path)
    } catch {
      // gone already
    }
  }

  // #create makes the lock file at path, content and all, or returns null
  // when it exists.
  async #create(path: string): Promise<string | null> {
    const token = randomUUID()
    const content = JSON.stringify({ pid: process.pid, host: HOST, token, at: Date.now() } satisfies LockFile)
    let fh: FileHandle | undefined
    if (this.#linkWorks && !testHook('no-link')) {
      const tmp = join(this.dir, `.tmp-${randomUUID()}`)
      fh = await open(tmp, 'wx', 0o600)
      let linked = false
      try {
        await fh.writeFile(content)
        await link(tmp, path)
        linked = true
      } catch (err) {
        const code = errCode(err)
        if (code !== 'EEXIST' && code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw err
        // No hard links on this file system: create and write in two steps.
        if (code !== 'EEXIST') this.#linkWorks = false
      } finally {
        if (!linked) await fh.close()
        await unlink(tmp).catch(() => {})
      }
      if (!linked) {
        if (this.#linkWorks) return null
        fh = undefined
      }
    }
    if (!fh) {
      try {
        fh = await open(path, 'wx', 0o600)
      } catch (err) {
        if (errCode(err) === 'EEXIST') return null
        throw err
      }
      await pauseForTest()
      await fh.writeFile(content)
    } else {
      await pauseForTest()
    }
    heldTokens.add(token)
    // The holder refreshes its lock (through its handle: the file it
    // created, wherever it is now), so that a lock nobody refreshes is known
    // for a dead or hung holder's.
    const lockFh = fh
    const timer = setInterval(() => {
      const now = new Date()
      lockFh.utimes(now, now).catch(() => {})
    }, this.#staleAfter / 3)
    timer.unref()
    this.#held.set(token, { fh: lockFh, timer })
    return token
  }

  // #inspect reads a lock file and its identity through one handle, or
  // returns undefined when there is none.
  async #inspect(path: string): Promise<{ stats: Stats; lock: LockFile | undefined } | undefined> {
    let fh: FileHandle
    try {
      fh = await open(path, 'r')
    } catch (err) {
      if (errCode(err) === 'ENOENT') return undefined
      throw err
    }
    try {
      const stats = await fh.stat()
      return { stats, lock: parseLock(await fh.readFile('utf8')) }
    } finally {
      await fh.close()
    }
  }

  #stale(stats: Stats, lock: LockFile | undefined): boolean {
    const age = Date.now() - stats.mtimeMs
    // Empty or garbled: being written, or its writer was killed between
    // creating and writing it.
    if (!lock) return age > Math.min(5000, this.#staleAfter)
    if (age > this.#staleAfter) return true
    // Another host's process cannot be seen from here; its refreshes say it lives.
    if (lock.host !== undefined && lock.host !== HOST) return false
    // This pid but not one of this process's tokens: the killed holder's pid was reused.
    if (lock.pid === process.pid) return !heldTokens.has(lock.token)
    return !alive(lock.pid)
  }

  // #takeOver removes the stale lock judged from seen. It moves whatever is
  // at path aside first and deletes it only if it is that same file: when
  // another taker replaced it meanwhile, the new holder's lock goes back.
  async #takeOver(path: string, seen: Stats): Promise<void> {
    const aside = join(this.dir, `.stale-${randomUUID()}`)
    try {
      await rename(path, aside)
    } catch (err) {
      if (errCode(err) === 'ENOENT') return
      throw err
    }
    let moved: Stats | undefined
    try {
      moved = await stat(aside)
    } catch {
      return
    }
    if (!sameFile(moved, seen)) {
      try {
        if (this.#linkWorks) await link(aside, path)
        else await copyFile(aside, path, constants.COPYFILE_EXCL)
      } catch {
        // EEXIST: a newer claim holds path now.
      }
    }
    await unlink(aside).catch(() => {})
  }
}
