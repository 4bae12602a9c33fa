// The mobile app's saveAnswer flow in a browser page: each answer gets a key
// and goes to IndexedDB before it is sent; on start-up and when the network
// returns the page sends what is pending.
import { IdemClient, IndexedDBOutbox } from '/static/dist/index.js'

const outbox = new IndexedDBOutbox()
// attempts records every request this tab sends, by key.
window.attempts = []
const client = new IdemClient({ outbox, backoff: a => Math.min(300, 20 * 2 ** a), maxRetryAfter: 300, onAttempt: e => window.attempts.push(e.key) })
const SAVE = '/api/funnels/stress/assessments/a1/answers/save'
const items = new Map()

function render(questionId, cls, text) {
  let li = items.get(questionId)
  if (!li) {
    li = document.createElement('li')
    items.set(questionId, li)
    const ul = document.getElementById('answers')
    ul.append(li)
    // Keep the questions in order.
    const n = x => Number(x.dataset.q.slice(1))
    li.dataset.q = questionId
    ;[...ul.children].sort((a, b) => n(a) - n(b)).forEach(x => ul.append(x))
  }
  li.className = cls
  li.textContent = `${questionId}: ${text}`
}

// Outcomes another tab received are shown here too.
const tab = new URLSearchParams(location.search).get('tab') || 'tab 1'
const channel = new BroadcastChannel('idem-answers')
channel.onmessage = ({ data }) => render(data.questionId, data.cls, data.text)

function show(r) {
  const { questionId } = JSON.parse(r.entry.body)
  if (r.status === 'sent') {
    const d = r.response.json().data
    const text = `saved as record ${d.id}${r.response.replayed ? ' (replayed: it had run before the reload)' : ''}, resent from IndexedDB by ${tab}`
    render(questionId, 'sent', text)
    channel.postMessage({ questionId, cls: 'sent', text })
  } else if (r.status !== 'busy' && r.status !== 'gone') {
    render(questionId, r.status === 'offline' ? 'offline' : 'pending', `pending in IndexedDB (${r.status})`)
  }
}

window.saveAnswer = (questionId, value) => {
  render(questionId, 'pending', 'saving…')
  client.request(SAVE, { method: 'POST', headers: { 'x-user-id': 'browser-user' }, body: { stepId: 's1', questionId, answerValue: value } })
    .then(r => render(questionId, 'sent', `saved as record ${r.json().data.id}`), e => render(questionId, 'pending', e.code))
}

window.retry = async () => {
  const results = await client.retryPending()
  results.forEach(show)
  document.getElementById('status').textContent = `retryPending: ${results.filter(r => r.status === 'sent').length} sent, ${(await outbox.list()).length} pending`
  return results.map(r => ({ status: r.status, key: r.entry.key, body: r.entry.body, data: r.response && r.response.json().data }))
}

window.pendingCount = async () => (await outbox.list()).length

window.addEventListener('online', () => window.retry())

// Start-up: show what survived the reload, then try to send it.
window.startup = (async () => {
  const pending = await outbox.list()
  for (const e of pending) render(JSON.parse(e.body).questionId, 'pending', 'pending in IndexedDB (restored after reload)')
  document.getElementById('status').textContent = `${pending.length} pending after start-up`
  const results = await client.retryPending()
  results.forEach(show)
  return results.map(r => r.status)
})()
