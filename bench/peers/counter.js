'use strict';
// The trivial operation every contender runs, as bench/internal/app does in
// Go: count executions per idempotency key and answer ~40 B of JSON.

const PATHS = {
  operation: '/charges',
  counts: '/_bench/counts',
  reset: '/_bench/reset',
  health: '/healthz',
};

class Counter {
  constructor() {
    this.reset();
  }

  reset() {
    this.total = 0;
    this.byKey = new Map();
  }

  // hit records one execution for key and returns the body to answer.
  hit(key) {
    this.total++;
    if (key) this.byKey.set(key, (this.byKey.get(key) || 0) + 1);
    return `{"id":"ch_${String(this.total).padStart(10, '0')}","amount":1000,"ok":true}`;
  }

  snapshot(perKey) {
    const s = { executions: this.total, keys: this.byKey.size, max_per_key: 0, min_per_key: 0 };
    let first = true;
    for (const n of this.byKey.values()) {
      if (first || n < s.min_per_key) s.min_per_key = n;
      first = false;
      if (n > s.max_per_key) s.max_per_key = n;
    }
    if (perKey) s.per_key = Object.fromEntries(this.byKey);
    return s;
  }
}

// delayOf returns the X-Bench-Delay header in milliseconds (Go duration
// syntax, as the harness sends it: "200ms", "1s").
function delayOf(headers) {
  const v = headers['x-bench-delay'];
  if (!v) return 0;
  const m = /^(\d+(?:\.\d+)?)(ms|s)$/.exec(v);
  if (!m) return 0;
  return Math.min(5000, Number(m[1]) * (m[2] === 's' ? 1000 : 1));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function listenArgs() {
  const port = Number(process.env.PORT || 18090);
  const redisURL = process.env.REDIS_URL || 'redis://127.0.0.1:6379/10';
  return { port, host: '127.0.0.1', redisURL };
}

module.exports = { Counter, PATHS, delayOf, sleep, listenArgs };
