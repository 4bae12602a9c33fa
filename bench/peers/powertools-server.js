'use strict';
// AWS Powertools for Lambda (TypeScript) 2.x idempotency with its Redis
// persistence layer (CachePersistenceLayer over @redis/client). Powertools
// makes a function idempotent, not an HTTP route, so the smallest server
// is node:http calling makeIdempotent's wrapper with {key, body}: the key
// comes from the Idempotency-Key header (eventKeyJmesPath). It keeps the
// function's return value, not an HTTP response.
//
// No payload check: payloadValidationJmesPath would be idem's fingerprint,
// but with this persistence layer (2.35.0) every replay then fails with
// IdempotencyValidationError, because CachePersistenceLayer._updateRecord
// writes the completed record without its payload hash.
const http = require('node:http');
const { createClient } = require('@redis/client');
const { makeIdempotent, IdempotencyConfig } = require('@aws-lambda-powertools/idempotency');
const { CachePersistenceLayer } = require('@aws-lambda-powertools/idempotency/cache');
const { Counter, PATHS, delayOf, sleep, listenArgs } = require('./counter');

async function main() {
  const { port, host, redisURL } = listenArgs();
  const client = await createClient({ url: redisURL }).connect();
  const counter = new Counter();
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'key',
    expiresAfterSeconds: 24 * 60 * 60,
    throwOnNoIdempotencyKey: false,
  });
  // Outside Lambda there is no deadline; give in-progress records idem's
  // default 60 s lease instead of none (and a warning per call).
  config.registerLambdaContext({ getRemainingTimeInMillis: () => 60000 });
  const charge = makeIdempotent(
    async (event) => {
      if (event.delay) await sleep(event.delay);
      return counter.hit(event.key);
    },
    { persistenceStore: new CachePersistenceLayer({ client }), config },
  );

  const send = (res, status, body, type = 'application/json') => {
    res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  };
  const srv = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'GET' && url.pathname === PATHS.health) return send(res, 200, 'ok\n', 'text/plain');
    if (req.method === 'GET' && url.pathname === PATHS.counts) {
      return send(res, 200, JSON.stringify(counter.snapshot(url.searchParams.get('per_key') === '1')));
    }
    if (req.method === 'POST' && url.pathname === PATHS.reset) {
      counter.reset();
      return send(res, 204, '');
    }
    if (req.method !== 'POST' || url.pathname !== PATHS.operation) return send(res, 404, '{"error":"not found"}');
    let raw = '';
    for await (const chunk of req) raw += chunk;
    let body;
    try {
      body = JSON.parse(raw || 'null');
    } catch {
      return send(res, 400, '{"error":"bad json"}');
    }
    try {
      const out = await charge({ key: req.headers['idempotency-key'], body, delay: delayOf(req.headers) });
      return send(res, 201, out);
    } catch (err) {
      // Powertools' errors, as an HTTP service would map them.
      const status = { IdempotencyAlreadyInProgressError: 409, IdempotencyValidationError: 422 }[err.name] || 500;
      return send(res, status, JSON.stringify({ error: err.name }));
    }
  });
  srv.keepAliveTimeout = 120000; // the harness keeps connections across runs
  srv.listen(port, host);
  process.on('SIGTERM', () => srv.close(() => client.quit().finally(() => process.exit(0))));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
