// The mobile app's three documented test cases ("Idempotency for Mobile
// Offline/Retry Readiness"), in TypeScript's runtime, against the gateway's
// mobile profile: saveAnswer with the caller's key.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { IdemClient } from '@idem-dev/client'
import { stack, mobileRoutes } from './harness.js'

let s, client
const user = '6f1c7d1e-3b7a-4d2e-9f51-0c4f8a1b2c3d'
const assessmentId = 'a1'
const stepId = 's1'
const questionId = 'q1'
const uuidv4 = () => crypto.randomUUID()

before(async () => {
  s = await stack({ profile: 'mobile', routes: mobileRoutes })
  s.proxy.mode = 'normal'
  client = new IdemClient({ baseURL: s.proxy.url })
})
after(async () => { await s.close() })

// saveAnswer as the app's docs call it; the client returns the outcome or
// throws an IdemError that carries the answer (error.response).
async function saveAnswer(stepId, questionId, value, idempotencyKey) {
  try {
    return await client.request(`/api/funnels/stress/assessments/${assessmentId}/answers/save`, {
      method: 'POST',
      key: idempotencyKey,
      headers: { 'x-user-id': user },
      body: { stepId, questionId, answerValue: value },
    })
  } catch (err) {
    if (err.response) return err.response
    throw err
  }
}

test('Test Case 1: Duplicate Request Returns Same Response', async () => {
  const idempotencyKey = uuidv4()
  const response1 = await saveAnswer(stepId, questionId, 3, idempotencyKey)
  const response2 = await saveAnswer(stepId, questionId, 3, idempotencyKey)
  assert.deepEqual(response2.json(), response1.json())
  assert.equal(response2.status, response1.status)
  assert.equal(response2.headers.get('X-Idempotency-Cached'), 'true')
  assert.equal(response2.replayed, true)
  assert.equal(response1.replayed, false)
  assert.equal(s.upstream.count(user, `/api/funnels/stress/assessments/${assessmentId}/answers/save`, JSON.stringify({ stepId, questionId, answerValue: 3 })), 1)
})

test('Test Case 2: Conflict Detection', async () => {
  const idempotencyKey = uuidv4()
  await saveAnswer(stepId, questionId, 1, idempotencyKey)
  const response = await saveAnswer(stepId, questionId, 2, idempotencyKey)
  assert.equal(response.status, 409)
  const body = response.json()
  assert.equal(body.success, false)
  assert.equal(body.error.code, 'DUPLICATE_OPERATION')
  assert.equal(body.error.details.conflictType, 'payload_mismatch')
  assert.equal(body.error.details.idempotencyKey, idempotencyKey)
  // And the client says so with a typed error, so that nobody "generates a
  // new key and retries": the first answer ran.
  const err = await client.request(`/api/funnels/stress/assessments/${assessmentId}/answers/save`, {
    method: 'POST', key: idempotencyKey, headers: { 'x-user-id': user }, body: { stepId, questionId, answerValue: 2 },
  }).then(() => null, e => e)
  assert.equal(err.code, 'conflict')
  assert.equal(err.kind, 'payload_mismatch')
  assert.equal(err.mayHaveRun, true)
})

test('Test Case 3: Different Keys Create Different Records', async () => {
  const key1 = uuidv4()
  const key2 = uuidv4()
  const response1 = await saveAnswer(stepId, 'q3', 3, key1)
  const response2 = await saveAnswer(stepId, 'q3', 3, key2)
  assert.notEqual(response1.json().data.id, response2.json().data.id)
})
