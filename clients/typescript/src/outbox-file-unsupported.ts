// What @idem-dev/client/file resolves to outside Node (browsers, React
// Native, other runtimes): a FileOutbox that says where to look instead, so
// that a bundle importing it builds and only its use fails.
import type { Outbox, PendingEntry } from './index.js'
import type { FileOutboxOptions } from './outbox-file.js'

export type { FileOutboxOptions }

const MESSAGE = '@idem-dev/client/file: FileOutbox needs Node.js (node:fs). In a browser use IndexedDBOutbox or LocalStorageOutbox, in React Native AsyncStorageOutbox, all from @idem-dev/client.'

function unsupported(): never {
  throw new Error(MESSAGE)
}

export class FileOutbox implements Outbox {
  readonly dir: string
  constructor(dir: string, options?: FileOutboxOptions) {
    void options
    this.dir = dir
    unsupported()
  }
  put(entry: PendingEntry): Promise<void> {
    void entry
    return unsupported()
  }
  get(id: string): Promise<PendingEntry | undefined> {
    void id
    return unsupported()
  }
  delete(id: string): Promise<void> {
    void id
    return unsupported()
  }
  list(): Promise<PendingEntry[]> {
    return unsupported()
  }
  claim(id: string): Promise<string | null> {
    void id
    return unsupported()
  }
  release(id: string, token: string): Promise<void> {
    void id, token
    return unsupported()
  }
}
