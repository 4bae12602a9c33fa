// FileOutbox: the outbox of a Node process, one JSON file per entry in a
// directory, written to a temporary file, synced and renamed, so that a
// crash (SIGKILL included) leaves either the whole entry or none of it.
import { open, readFile, readdir, rename, unlink, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'

async function syncDir(dir) {
  let fh
  try {
    fh = await open(dir, 'r')
    await fh.sync()
  } catch {
    // Some file systems cannot sync a directory; the rename is then as
    // durable as they make it.
  } finally {
    if (fh) await fh.close()
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return err.code === 'EPERM'
  }
}

// The lock tokens this process holds, over every FileOutbox instance: a lock
// file naming this pid with a token not here was left by a killed process
// whose pid was reused.
const heldTokens = new Set()

export class FileOutbox {
  constructor(dir) {
    this.dir = dir
    this.ready = mkdir(dir, { recursive: true, mode: 0o700 })
  }
  #path(id) {
    return join(this.dir, id + '.json')
  }
  async put(e) {
    await this.ready
    const tmp = join(this.dir, `.tmp-${randomUUID()}`)
    const fh = await open(tmp, 'wx', 0o600)
    try {
      await fh.writeFile(JSON.stringify(e))
      await fh.sync()
    } finally {
      await fh.close()
    }
    await rename(tmp, this.#path(e.id))
    await syncDir(this.dir)
  }
  async get(id) {
    await this.ready
    try {
      return JSON.parse(await readFile(this.#path(id), 'utf8'))
    } catch (err) {
      if (err.code === 'ENOENT') return undefined
      throw err
    }
  }
  async delete(id) {
    await this.ready
    try {
      await unlink(this.#path(id))
    } catch (err) {
      if (err.code !== 'ENOENT') throw err
    }
    await syncDir(this.dir)
  }
  async list() {
    await this.ready
    const out = []
    for (const name of await readdir(this.dir)) {
      if (!name.endsWith('.json')) continue
      try {
        out.push(JSON.parse(await readFile(join(this.dir, name), 'utf8')))
      } catch (err) {
        if (err.code !== 'ENOENT') throw err // deleted meanwhile
      }
    }
    return out
  }
  /**
   * claim makes this process the only sender of entry id across processes:
   * a lock file created exclusively. A lock whose process is gone (killed
   * mid-retry) is taken over; a live holder keeps it however long it
   * retries. Resolves with a token for release, or null when another live
   * sender holds it.
   */
  async claim(id) {
    await this.ready
    const path = join(this.dir, id + '.lock')
    const token = randomUUID()
    for (let i = 0; i < 2; i++) {
      try {
        const fh = await open(path, 'wx', 0o600)
        await fh.writeFile(JSON.stringify({ pid: process.pid, at: Date.now(), token }))
        await fh.close()
        heldTokens.add(token)
        return token
      } catch (err) {
        if (err.code !== 'EEXIST') throw err
      }
      let held
      try {
        held = JSON.parse(await readFile(path, 'utf8'))
      } catch {
        held = null // being written, or just released
      }
      // Held by a live process, unless that "process" is this one holding
      // no such token: the killed holder's pid was reused.
      if (held && alive(held.pid) && (held.pid !== process.pid || heldTokens.has(held.token))) return null
      if (held) await unlink(path).catch(() => {})
    }
    return null
  }
  async release(id, token) {
    heldTokens.delete(token)
    const path = join(this.dir, id + '.lock')
    try {
      const held = JSON.parse(await readFile(path, 'utf8'))
      if (held.token === token) await unlink(path)
    } catch {
      // gone already
    }
  }
}
