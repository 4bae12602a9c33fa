// The mobile app's saveAnswer flow ("Idempotency for Mobile Offline/Retry
// Readiness"), done right with @idem-dev/client:
//  - one key per user intent (a tap on an answer), stored in the outbox
//    before the request is sent;
//  - retried with the same key and body on network errors, 5xx, 429 and
//    409 in_progress, never on a final answer, and dropped from the outbox
//    only once the server gave an outcome (the docs' sample dropped it on any
//    HTTP answer, 5xx included);
//  - a 409 DUPLICATE_OPERATION is a bug report, not "generate a new key and
//    retry": the first save ran;
//  - retryPending() on start-up and when the network returns, which does not
//    remove entries from the list it iterates and sends each to its own
//    endpoint (the sample's `endpoint` was undefined);
//  - given up after 24 hours, the server's key TTL.
import { IdemClient, IdemError, type IdemResponse, type Outbox, type PendingResult } from '@idem-dev/client'

export interface SavedAnswer {
  success: boolean
  data: { id: string }
}

export function answersApp(options: { baseURL: string; userId: string; assessmentId: string; outbox?: Outbox; fetch?: typeof fetch }) {
  const client = new IdemClient({
    baseURL: options.baseURL,
    outbox: options.outbox,
    fetch: options.fetch,
    giveUpAfter: 24 * 60 * 60 * 1000,
  })
  const endpoint = `/api/funnels/stress/assessments/${options.assessmentId}/answers/save`

  async function saveAnswer(stepId: string, questionId: string, answerValue: number, idempotencyKey?: string): Promise<IdemResponse> {
    try {
      return await client.request(endpoint, {
        method: 'POST',
        key: idempotencyKey, // omitted: a new UUID for this tap
        headers: { 'X-User-ID': options.userId },
        body: { stepId, questionId, answerValue },
        maxAttempts: 5, // then the answer waits in the outbox for retryPendingRequests
      })
    } catch (err) {
      if (err instanceof IdemError && err.code === 'conflict') {
        // Same key, different answer: the client reused a key. The first
        // save ran; saving again under a new key would record two answers.
        console.error(`answer ${questionId}: key ${err.key} was used for another answer (${err.kind})`)
      }
      throw err
    }
  }

  // On app start-up and when the network is restored.
  async function retryPendingRequests(): Promise<PendingResult[]> {
    return client.retryPending()
  }

  return { saveAnswer, retryPendingRequests, client }
}

// node examples/save-answer.js BASE_URL (after tsc): saves three answers,
// the second one twice with its key, and prints what the server said.
export async function main(baseURL: string): Promise<string[]> {
  const app = answersApp({ baseURL, userId: '6f1c7d1e-3b7a-4d2e-9f51-0c4f8a1b2c3d', assessmentId: 'a1' })
  const out: string[] = []
  await app.retryPendingRequests()
  const first = await app.saveAnswer('s1', 'q1', 4)
  out.push(`q1 saved as ${first.json<SavedAnswer>()?.data.id}`)
  const key = crypto.randomUUID()
  const a = await app.saveAnswer('s1', 'q2', 2, key)
  const b = await app.saveAnswer('s1', 'q2', 2, key) // the user tapped twice
  out.push(`q2 saved as ${a.json<SavedAnswer>()?.data.id}, again as ${b.json<SavedAnswer>()?.data.id} (replayed: ${b.replayed})`)
  try {
    await app.saveAnswer('s1', 'q2', 3, key)
  } catch (err) {
    if (err instanceof IdemError) out.push(`q2 with another value under the same key: ${err.code} ${err.status} ${err.kind}`)
  }
  return out
}
