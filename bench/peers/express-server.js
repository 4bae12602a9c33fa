'use strict';
// express-idempotency 1.0.6 with its Redis adapter, set up as its README
// shows: app.post('*', idempotency()) and a handler that checks isHit.
// express.json() gives the middleware a body to compare (its "intent"
// check: url, method, query and body), the nearest it has to a fingerprint.
const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
const RedisAdapter = require('express-idempotency-redis-adapter').default;
const { Counter, PATHS, delayOf, sleep, listenArgs } = require('./counter');

async function main() {
  const { port, host, redisURL } = listenArgs();
  const adapter = new RedisAdapter({ connectionConfig: { url: redisURL } });
  await adapter.connect();
  const counter = new Counter();
  const app = express();
  app.use(express.json());
  app.post(PATHS.operation, idempotency({ dataAdapter: adapter }), async (req, res) => {
    if (getSharedIdempotencyService().isHit(req)) return;
    const d = delayOf(req.headers);
    if (d) await sleep(d);
    res.status(201).type('application/json').send(counter.hit(req.get('idempotency-key')));
  });
  app.get(PATHS.counts, (req, res) => res.json(counter.snapshot(req.query.per_key === '1')));
  app.post(PATHS.reset, (req, res) => {
    counter.reset();
    res.status(204).end();
  });
  app.get(PATHS.health, (req, res) => res.send('ok\n'));
  // The middleware passes its 409 and 417 to next(err): answer them
  // without express's HTML stack page.
  app.use((err, req, res, next) => {
    res.status(res.statusCode >= 400 ? res.statusCode : 500).json({ error: err.message });
  });
  const srv = app.listen(port, host);
  srv.keepAliveTimeout = 120000; // the harness keeps connections across runs
  process.on('SIGTERM', () => srv.close(() => adapter.disconnect().finally(() => process.exit(0))));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
