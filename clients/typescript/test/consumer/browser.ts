// A browser app's use of the published package, type-checked with tsc
// --strict under lib es2022 + dom, no Node types, the "browser" condition
// and bundler resolution (tsconfig.browser.json); not run.
import { IdemClient, IdemError, IndexedDBOutbox, LocalStorageOutbox, type Outcome } from '@idem-dev/client'
import { FileOutbox } from '@idem-dev/client/file'

const client = new IdemClient({
  outbox: new IndexedDBOutbox({ name: 'app-outbox', indexedDB: window.indexedDB }),
  fetch: window.fetch.bind(window),
  onOutcome: (o: Outcome) => {
    document.title = `${o.entry.key}: ${o.status}`
  },
})
new LocalStorageOutbox(window.localStorage)
new LocalStorageOutbox(sessionStorage, 'other:')

addEventListener('online', () => {
  void client.retryPending({ onOutcome: o => console.log(o.status, o.response?.keyExpiresAt?.toISOString()) })
})

export async function save(answer: { stepId: string; value: number }): Promise<string> {
  try {
    const r = await client.request('/api/answers', {
      method: 'POST', body: answer, credentials: 'include', keepalive: true, signal: AbortSignal.timeout(5000),
    })
    return r.keyExpiresAt ? r.keyExpiresAt.toUTCString() : String(r.status)
  } catch (err) {
    if (err instanceof IdemError && (err.code === 'network' || err.pending)) return `pending: ${String(err.cause)}`
    throw err
  }
}

// The file outbox's types resolve here too; at run time it says it needs Node.
export const fileOutboxForNode: typeof FileOutbox = FileOutbox
