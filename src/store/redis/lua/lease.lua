-- tollgate: one concurrency lease taken or given back, the two calls of every lease. The
-- decisions of check.lua's concurrency branch for a batch of that one item, at fewer Redis
-- and Lua calls: tests/redis_store_test.cc's ConcurrencyTableMatchesTheAlgorithm checks both
-- scripts against src/algorithm/concurrency.h (this one alone, check.lua beside another item).
--
-- KEYS[1]   the limit's lease set, <prefix><limit name>:{<key>}:l (member: lease id, score:
--           its expiry in µs), PEXPIRE'd to one lease time on every ZADD.
-- ARGV[1]   "" in production: time comes from Redis TIME. Tests pass integer µs to pin it.
-- ARGV[2]   26 bytes, as check.lua reads a concurrency item: struct '<Bddd' = 'c', the limit,
--           the lease time in µs, the cost; then the op byte: 'K' take a slot (cost 1; cost 0
--           only looks, cost > 1 is refused) or 'L' release.
-- ARGV[3]   the lease id.
-- ARGV[4]   the lease time in ms, rounded up, as decimal text (PEXPIRE's argument).
--
-- Returns what check.lua returns for one item: struct '<dBddd' = now_micros, flags (allowed +
-- 2 × reason: 0 none, 1 over limit, 2 cost exceeds limit, 3 not held), remaining,
-- reset_after_micros, retry_after_micros.
--
-- Fewer calls than the general loop: a set that does not exist (ZCARD 0) has nothing to
-- forget or release, and a lease just taken is the latest of all (reset_after = the lease
-- time, nothing to read back).

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local limit, lease, cost = struct.unpack('<ddd', ARGV[2], 2)
local op = string.byte(ARGV[2], 26)
local set = KEYS[1]

-- The leases held: the set's members less those expired by now, forgotten here.
local held = redis.call('ZCARD', set)
if held > 0 then
  held = held - redis.call('ZREMRANGEBYSCORE', set, '-inf', string.format('%d', now))
end

local allowed, reason = 0, 0
if op == 76 then  -- 'L': applied whatever it finds; reason 3 if the lease was not held
  if held > 0 and redis.call('ZREM', set, ARGV[3]) == 1 then
    held = held - 1
    allowed = 1
  else
    reason = 3
  end
elseif cost > 1 or cost > limit then
  reason = 2
elseif held + cost > limit then
  reason = 1
else
  allowed = 1
  if cost == 1 then
    redis.call('ZADD', set, string.format('%d', now + lease), ARGV[3])
    redis.call('PEXPIRE', set, ARGV[4])
    -- The lease just taken expires last, and a check that passed waits for nothing.
    return struct.pack('<dBddd', now, 1, limit - held - 1, lease, 0)
  end
end

-- When slots free: reset_after, until the last lease expires; retry_after, when none is free,
-- until the lease whose end frees one expires (rank held - limit in expiry order).
local reset_after, retry_after = 0, 0
if held > 0 then
  reset_after = tonumber(redis.call('ZRANGE', set, held - 1, held - 1, 'WITHSCORES')[2]) - now
  if held >= limit then
    retry_after =
      tonumber(redis.call('ZRANGE', set, held - limit, held - limit, 'WITHSCORES')[2]) - now
  end
end
return struct.pack('<dBddd', now, allowed + 2 * reason, limit - held, reset_after, retry_after)
