'use strict';
// @node-idempotency/nestjs 1.0.4 with its Redis storage adapter, set up as
// its README shows (NodeIdempotencyModule.forRootAsync and @Idempotent on
// the handler), in plain JavaScript: the decorators are applied by hand
// instead of by a TypeScript build. Its fingerprint is a hash of the parsed
// JSON body (a changed body is 422); in-flight duplicates get 409.
require('reflect-metadata');
const { Module, Controller, Post, Get, HttpCode, Req, Res, Query } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { NodeIdempotencyModule, Idempotent } = require('@node-idempotency/nestjs');
const { Counter, PATHS, delayOf, sleep, listenArgs } = require('./counter');

const { port, host, redisURL } = listenArgs();
const counter = new Counter();

class ChargesController {
  async charge(req) {
    const d = delayOf(req.headers);
    if (d) await sleep(d);
    // Returned as an object: the interceptor stores and replays what the
    // handler returns, and Nest serializes it as JSON.
    return JSON.parse(counter.hit(req.headers['idempotency-key']));
  }

  counts(perKey) {
    return counter.snapshot(perKey === '1');
  }

  reset(res) {
    counter.reset();
    res.status(204).end();
  }

  health() {
    return 'ok\n';
  }
}

// The decorators TypeScript would apply.
const proto = ChargesController.prototype;
const method = (name, ...decorators) => {
  const desc = Object.getOwnPropertyDescriptor(proto, name);
  Object.defineProperty(proto, name, Reflect.decorate(decorators, proto, name, desc));
};
Req()(proto, 'charge', 0);
method('charge', Post(PATHS.operation), HttpCode(201), Idempotent({}));
Query('per_key')(proto, 'counts', 0);
method('counts', Get(PATHS.counts));
Res()(proto, 'reset', 0);
method('reset', Post(PATHS.reset));
method('health', Get(PATHS.health));
Reflect.decorate([Controller()], ChargesController);

class AppModule {}
Reflect.decorate(
  [
    Module({
      imports: [
        NodeIdempotencyModule.forRootAsync({
          storage: { adapter: 'redis', options: { url: redisURL } },
          cacheTTLMS: 24 * 60 * 60 * 1000,
        }),
      ],
      controllers: [ChargesController],
    }),
  ],
  AppModule,
);

async function main() {
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(port, host);
  app.getHttpServer().keepAliveTimeout = 120000; // the harness keeps connections across runs
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
