// The retry rule every idem client shares: clients/testdata/retry.json, the
// vectors idemclient's Go tests read too. Each answer must get the verdict
// and kind the file names.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { classify } from '@idem-dev/client'

const { vectors } = JSON.parse(readFileSync(new URL('../../testdata/retry.json', import.meta.url), 'utf8'))
const names = { final: 'final', conflict: 'conflict', running: 'wait', retry: 'retry' }

test('the shared retry vectors', () => {
  assert.ok(vectors.length >= 50, `${vectors.length} vectors: the file lost some`)
  const wrong = []
  for (const v of vectors) {
    const { verdict, kind } = classify(v.status, new Headers(v.headers), v.body)
    if (names[verdict] !== v.verdict || kind !== v.kind) wrong.push(`${v.name}: ${names[verdict]} "${kind}", want ${v.verdict} "${v.kind}"`)
  }
  assert.deepEqual(wrong, [])
})
