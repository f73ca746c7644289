// Drives one npm rate limiter as fast as it goes against Redis, for bench/compare.py: the
// same workload, keys and concurrency as bench/compare_driver.cc, and the same JSON line.
//
//   node bench/peers/drive.js --peer rlf --redis-port 6379 --callers 64 --keys 1000 \
//       --limit 1000000000 --window-s 60 --duration-s 5
//   node bench/peers/drive.js --peer erl --redis-port 6379 --requests 600 --limit 25 ...
//
// Peers (installed by `npm ci --prefix bench/peers`, exact versions in package.json):
//   rlf  rate-limiter-flexible's RateLimiterRedis over ioredis: consume(key), a fixed window
//        of --window-s starting at a key's first hit (one EVALSHA per decision).
//   erl  rate-limit-redis's RedisStore, the store of express-rate-limit, over ioredis, driven
//        directly: increment(key) as the middleware calls it per request, allowed when the
//        returned totalHits <= limit (a fixed window starting at the first hit; one EVALSHA).
//        No HTTP and no express app, so the figure is the limiter's, not the web framework's.
//
// --callers async callers each keep one check outstanding on keys user:0 .. user:<keys-1>
// in turn (closed loop). ioredis runs with enableAutoPipelining (its fastest documented
// setting; --no-auto-pipelining turns it off). The first --warmup-s seconds (default
// min(1, duration / 5), JIT warm-up) are run but not measured. cpu_s is this process' user+
// system CPU (process.cpuUsage) over the measured interval.
'use strict';

const Redis = require('ioredis');

function parseArgs(argv) {
  const options = {
    peer: 'rlf',
    redisHost: '127.0.0.1',
    redisPort: 6379,
    callers: 8,
    keys: 1000,
    limit: 1e9,
    windowS: 60,
    durationS: 0,
    warmupS: -1,
    requests: 0,
    keyPrefix: '',
    autoPipelining: true,
  };
  const numeric = {
    '--redis-port': 'redisPort',
    '--callers': 'callers',
    '--keys': 'keys',
    '--limit': 'limit',
    '--window-s': 'windowS',
    '--duration-s': 'durationS',
    '--warmup-s': 'warmupS',
    '--requests': 'requests',
  };
  for (let i = 2; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--no-auto-pipelining') {
      options.autoPipelining = false;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--peer') options.peer = value;
    else if (flag === '--redis-host') options.redisHost = value;
    else if (flag === '--key-prefix') options.keyPrefix = value;
    else if (numeric[flag]) {
      const number = Number(value);
      if (!Number.isFinite(number) || number < 0) throw new Error(`bad value for ${flag}: ${value}`);
      options[numeric[flag]] = number;
    } else throw new Error(`unknown flag ${flag}`);
  }
  if ((options.durationS > 0) === (options.requests > 0)) {
    throw new Error('give exactly one of --duration-s and --requests');
  }
  if (options.warmupS < 0) options.warmupS = Math.min(1, options.durationS / 5);
  if (options.requests > 0) options.warmupS = 0;
  return options;
}

// Returns check(key) -> Promise<boolean allowed>; throws (rejects) on a Redis failure.
async function makePeer(options, redis) {
  if (options.peer === 'rlf') {
    const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');
    const limiter = new RateLimiterRedis({
      storeClient: redis,
      points: options.limit,
      duration: options.windowS,
      keyPrefix: `${options.keyPrefix}rlflx`,
    });
    return async (key) => {
      try {
        await limiter.consume(key, 1);
        return true;
      } catch (rejection) {
        if (rejection instanceof RateLimiterRes) return false;
        throw rejection;
      }
    };
  }
  if (options.peer === 'erl') {
    const { RedisStore } = require('rate-limit-redis');
    const store = new RedisStore({
      sendCommand: (command, ...args) => redis.call(command, ...args),
      prefix: `${options.keyPrefix}rl:`,
    });
    await store.init({ windowMs: options.windowS * 1000 });
    return async (key) => {
      const { totalHits } = await store.increment(key);
      return totalHits <= options.limit;
    };
  }
  throw new Error(`unknown peer ${options.peer}`);
}

function cpuSeconds() {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

async function main() {
  const options = parseArgs(process.argv);
  const redis = new Redis({
    host: options.redisHost,
    port: options.redisPort,
    enableAutoPipelining: options.autoPipelining,
    maxRetriesPerRequest: 1,
    lazyConnect: true,
  });
  // redis-server may still be starting: retry the first connection for up to 5 s.
  for (let attempt = 0; ; attempt++) {
    try {
      await redis.connect();
      break;
    } catch (error) {
      if (attempt >= 250) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  const check = await makePeer(options, redis);

  const startNs = process.hrtime.bigint();
  const measureStartNs = startNs + BigInt(Math.round(options.warmupS * 1e9));
  const endNs = options.durationS > 0
    ? measureStartNs + BigInt(Math.round(options.durationS * 1e9))
    : null;
  let issued = 0;
  let allowed = 0;
  let denied = 0;
  let errors = 0;
  let totalDecisions = 0;  // with the warm-up, for per-decision Redis costs
  const latenciesNs = [];
  let cpuAtStart = cpuSeconds();
  let measuredFromNs = startNs;
  if (options.warmupS > 0) {
    setTimeout(() => {
      cpuAtStart = cpuSeconds();
      measuredFromNs = process.hrtime.bigint();
    }, options.warmupS * 1000);
  }

  async function caller() {
    for (;;) {
      const startedNs = process.hrtime.bigint();
      if (endNs !== null && startedNs >= endNs) return;
      if (options.requests > 0 && issued >= options.requests) return;
      const key = `user:${issued % options.keys}`;
      issued++;
      let ok = true;
      let wasAllowed = false;
      try {
        wasAllowed = await check(key);
      } catch (error) {
        ok = false;
        if (errors === 0) console.error(`drive.js: ${error && error.message}`);
      }
      if (!ok) errors++;
      else totalDecisions++;
      if (startedNs >= measureStartNs && ok) {
        if (wasAllowed) allowed++;
        else denied++;
        latenciesNs.push(Number(process.hrtime.bigint() - startedNs));
      }
      if (!ok) return;  // a broken Redis ends this caller; the error is reported
    }
  }
  const callers = [];
  for (let i = 0; i < options.callers; i++) callers.push(caller());
  await Promise.all(callers);

  const cpuS = cpuSeconds() - cpuAtStart;
  let finishedNs = process.hrtime.bigint();
  if (endNs !== null && finishedNs > endNs) finishedNs = endNs;
  const seconds = Number(finishedNs - measuredFromNs) / 1e9;
  latenciesNs.sort((a, b) => a - b);
  const percentile = (p) => latenciesNs.length === 0
    ? 0 : latenciesNs[Math.floor(p * (latenciesNs.length - 1))] / 1000;
  const decisions = allowed + denied;
  const result = {
    decisions,
    allowed,
    denied,
    errors,
    seconds: Number(seconds.toFixed(4)),
    per_second: seconds > 0 ? Number((decisions / seconds).toFixed(1)) : 0,
    p50_us: Number(percentile(0.5).toFixed(1)),
    p99_us: Number(percentile(0.99).toFixed(1)),
    cpu_s: Number(cpuS.toFixed(4)),
    cpu_s_per_million: decisions > 0 ? Number((cpuS * 1e6 / decisions).toFixed(3)) : 0,
    total_decisions: totalDecisions,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  redis.disconnect();
}

main().catch((error) => {
  console.error(`drive.js: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
