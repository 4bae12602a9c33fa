import type { Outbox, PendingEntry } from './index.js'

/** The outbox of a Node process: one synced JSON file per entry in dir; locks across processes. */
export class FileOutbox implements Outbox {
  constructor(dir: string)
  readonly dir: string
  put(entry: PendingEntry): Promise<void>
  get(id: string): Promise<PendingEntry | undefined>
  delete(id: string): Promise<void>
  list(): Promise<PendingEntry[]>
  claim(id: string): Promise<string | null>
  release(id: string, token: string): Promise<void>
}
