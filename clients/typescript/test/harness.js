// The real thing for the client's tests: the gateway built from this
// repository (cmd/idem) over the memory store, in front of a counting
// upstream, behind a fault proxy that loses answers after the upstream ran
// and cuts requests in flight.
import http from 'node:http'
import net from 'node:net'
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, writeFileSync, readFileSync, existsSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname, resolve, extname } from 'node:path'
import { fileURLToPath } from 'node:url'

export const pkgRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..')
export const repoRoot = resolve(pkgRoot, '../..')

let built
/** gatewayBin builds ./cmd/idem once per test process (IDEM_BIN overrides). */
export function gatewayBin() {
  if (process.env.IDEM_BIN) return process.env.IDEM_BIN
  if (!built) {
    const dir = join(tmpdir(), 'idem-ts-client-bin')
    mkdirSync(dir, { recursive: true })
    built = join(dir, 'idem')
    execFileSync('go', ['build', '-o', built, './cmd/idem'], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] })
  }
  return built
}

export function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer()
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => res(port))
    })
    s.on('error', rej)
  })
}

function listen(server) {
  return new Promise(res => server.listen(0, '127.0.0.1', () => res(`http://127.0.0.1:${server.address().port}`)))
}

function readBody(req) {
  return new Promise((res, rej) => {
    const chunks = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => res(Buffer.concat(chunks)))
    req.on('error', rej)
  })
}

/**
 * startUpstream is the API behind the gateway: it counts executions per
 * user, path and body (every logical request of a test has its own body)
 * and answers {"success":true,"data":{"id":..., "n":..., ...}}. ?delay=ms
 * makes it slow; ?status=N answers N.
 */
export async function startUpstream() {
  const counts = new Map()
  let seq = 0
  const server = http.createServer(async (req, res) => {
    const body = (await readBody(req)).toString()
    const u = new URL(req.url, 'http://x')
    const user = req.headers['x-user-id'] || ''
    const k = `${user} ${u.pathname} ${body}`
    counts.set(k, (counts.get(k) || 0) + 1)
    const delay = Number(u.searchParams.get('delay') || 0)
    if (delay) await new Promise(r => setTimeout(r, delay))
    let parsed = null
    try {
      parsed = JSON.parse(body)
    } catch {}
    const status = Number(u.searchParams.get('status') || (u.pathname.endsWith('/assessments') ? 201 : 200))
    const out = JSON.stringify({ success: status < 300, data: { id: String(++seq), n: parsed && parsed.n, user, path: u.pathname, received: parsed } })
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) })
    res.end(out)
  })
  const url = await listen(server)
  return {
    url,
    counts,
    count: (user, path, body) => counts.get(`${user} ${path} ${body}`) || 0,
    total: () => [...counts.values()].reduce((a, b) => a + b, 0),
    close: () => new Promise(r => { server.closeAllConnections(); server.close(r) }),
  }
}

/** The mobile app's endpoints (its table: payload check on answers/save only). */
export const mobileRoutes = `routes:
  - match: "POST /api/funnels/{slug}/assessments"
    fingerprint: none
  - match: "POST /api/funnels/{slug}/assessments/{id}/answers/save"
    fingerprint: body
  - match: "POST /api/funnels/{slug}/assessments/{id}/steps/{stepId}/validate"
    fingerprint: none
  - match: "POST /api/funnels/{slug}/assessments/{id}/complete"
    fingerprint: none
`

/** startGateway runs `idem serve` over the memory store with profile in front of upstream. */
export async function startGateway({ upstream, profile = 'ietf', routes = '', store = 'memory:' }) {
  const dir = mkdtempSync(join(tmpdir(), 'idem-ts-gw-'))
  const port = await freePort()
  const cfg = join(dir, 'idem.yaml')
  writeFileSync(cfg, `listen: 127.0.0.1:${port}
upstream: ${upstream}
store: "${store}"
admin_listen: "off"
log_level: error
tenant: { header: X-User-ID }
defaults: { profile: ${profile} }
${routes}`)
  const proc = spawn(gatewayBin(), ['serve', '--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  proc.stderr.on('data', d => (stderr += d))
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`gateway exited: ${stderr}`)
    try {
      await new Promise((res, rej) => {
        const s = net.connect(port, '127.0.0.1', () => { s.end(); res() })
        s.on('error', rej)
      })
      break
    } catch {
      if (i > 200) throw new Error(`gateway did not start: ${stderr}`)
      await new Promise(r => setTimeout(r, 50))
    }
  }
  return {
    url,
    stderr: () => stderr,
    close: () => new Promise(r => {
      if (proc.exitCode !== null) return r()
      proc.on('exit', r)
      proc.kill('SIGTERM')
    }),
  }
}

// mulberry32: a seeded PRNG, so that a failing run can be replayed
// (IDEM_FAULT_SEED).
function rng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const MIME = { '.js': 'text/javascript', '.html': 'text/html', '.json': 'application/json', '.css': 'text/css' }

/**
 * startProxy sits between client and gateway. mode 'faulty': drop of the
 * requests reach the gateway but lose their answer (the socket is closed
 * once the upstream answered), cut are cut in flight (half before they are
 * forwarded, half after, while the gateway works). 'normal' forwards all,
 * 'drop' loses every answer, 'cut' forwards nothing; dropIf(req, body), when
 * set, loses the answers it picks in any mode. GET /static/* serves
 * files of the package (for the browser test), never faulted.
 */
export async function startProxy({ target, drop = 0.3, cut = 0.1, seed = Number(process.env.IDEM_FAULT_SEED || 1) }) {
  const random = rng(seed)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 })
  const stats = { requests: 0, dropped: 0, cut: 0, perKey: new Map() }
  const p = { mode: 'faulty', stats, seed }
  const server = http.createServer(async (req, res) => {
    if (req.method === 'GET' && req.url.startsWith('/static/')) {
      const file = resolve(pkgRoot, '.' + decodeURIComponent(new URL(req.url, 'http://x').pathname.slice('/static'.length)))
      if (!file.startsWith(pkgRoot) || !existsSync(file)) {
        res.writeHead(404).end()
        return
      }
      res.writeHead(200, { 'content-type': MIME[extname(file)] || 'application/octet-stream', 'cache-control': 'no-store' })
      res.end(readFileSync(file))
      return
    }
    const body = await readBody(req)
    stats.requests++
    const key = req.headers['idempotency-key']
    if (key) stats.perKey.set(key, (stats.perKey.get(key) || 0) + 1)
    const r = random()
    let isCut = p.mode === 'cut' || (p.mode === 'faulty' && r < cut)
    const isDrop = !isCut && (p.mode === 'drop' || (p.mode === 'faulty' && r < cut + drop) || (!!p.dropIf && p.dropIf(req, body)))
    if (isCut) stats.cut++
    if (isDrop) stats.dropped++
    if (isCut && (p.mode === 'cut' || random() < 0.5)) {
      req.socket.destroy()
      return
    }
    const headers = { ...req.headers }
    delete headers.connection
    delete headers['keep-alive']
    const up = http.request(target + req.url, { method: req.method, headers, agent }, upRes => {
      const chunks = []
      upRes.on('data', c => chunks.push(c))
      upRes.on('end', () => {
        if (isDrop) {
          req.socket.destroy()
          return
        }
        const h = { ...upRes.headers }
        delete h['transfer-encoding']
        delete h.connection
        const b = Buffer.concat(chunks)
        h['content-length'] = b.length
        res.writeHead(upRes.statusCode, h)
        res.end(b)
      })
    })
    up.on('error', () => req.socket.destroy())
    up.end(body)
    if (isCut) {
      setTimeout(() => {
        up.destroy()
        req.socket.destroy()
      }, random() * 20)
    }
  })
  p.url = await listen(server)
  const port = server.address().port
  // down closes the listener: connections are refused, as when the phone
  // has no network. up listens again on the same port.
  p.down = () => new Promise(r => { server.close(() => r()); server.closeAllConnections() })
  p.up = () => new Promise((r, j) => { server.once('error', j); server.listen(port, '127.0.0.1', () => r()) })
  p.close = () => new Promise(r => {
    agent.destroy()
    server.closeAllConnections()
    if (server.listening) server.close(() => r())
    else r()
  })
  return p
}

/** stack starts upstream, gateway (profile) and proxy; close stops them. */
export async function stack({ profile = 'ietf', routes = '', drop, cut } = {}) {
  const upstream = await startUpstream()
  const gateway = await startGateway({ upstream: upstream.url, profile, routes })
  const proxy = await startProxy({ target: gateway.url, drop, cut })
  return {
    upstream, gateway, proxy,
    close: async () => {
      await proxy.close()
      await gateway.close()
      await upstream.close()
    },
  }
}

/** fastBackoff keeps the tests short: 5 ms doubling up to 200 ms. */
export const fastBackoff = n => Math.min(200, 5 * 2 ** (n - 1)) * (0.5 + Math.random() / 2)

/** until polls fn every 10 ms until it returns (or resolves to) true, and
 * throws, naming what it waited for, after ms milliseconds. */
export async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise(r => setTimeout(r, 10))
  }
}
