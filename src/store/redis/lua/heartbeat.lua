-- tollgate: one heartbeat of one instance (docs/resilience.md, "N, the number of live
-- instances"), atomic in Redis, on Redis' own clock so the instances' clocks do not matter.
--
-- KEYS[1]   the sorted set of live instances (member: instance id, score: last heartbeat,
--           Redis TIME in µs).
-- ARGV[1]   this instance's id.      ARGV[2]  how long an instance stays counted, in µs.
--
-- Adds or refreshes this instance, drops members not heard from for ARGV[2], sets the set's
-- TTL to twice that (in whole milliseconds), and returns the number of live instances.
--
-- With demand (fail_open's demand-weighted shares, src/algorithm/share.h), also:
-- KEYS[2..4] the fleet's demand of the periods p with p % 3 == 0, 1, 2: a hash with fields
--           `period` (p), `created` (an opaque token: Redis TIME when this incarnation of the
--           hash began) and `l:<limit>` (units asked for the limit in p, every instance's).
-- ARGV[3]   a period's length, in µs (the current period p = floor(Redis TIME / ARGV[3])).
-- ARGV[4]   the period this instance last learned the fleet's totals in (-1: none).
-- ARGV[5..] pairs: a limit's name, the units this instance asked for it since its last
--           heartbeat.
-- Adds the units to p's hash (replacing the hash first if it holds an older period), sets its
-- TTL to three periods, and returns {count, p, created}, followed, when p differs from
-- ARGV[4], by the whole hashes of p - 1 and p - 2 (an empty array for one that holds another
-- period or is gone). Every key it writes gets its TTL in this step.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) * 2)
local count = redis.call('ZCARD', KEYS[1])
if #KEYS == 1 then
  return count
end

local length = tonumber(ARGV[3])
local period = math.floor(now / length)
local function key_of(p)
  return KEYS[2 + p % 3]
end
local function holds(key, p)
  return tonumber(redis.call('HGET', key, 'period') or '-1') == p
end

local current = key_of(period)
local created = redis.call('HGET', current, 'created')
if not created or not holds(current, period) then
  redis.call('DEL', current)
  created = t[1] .. '.' .. t[2]
  redis.call('HSET', current, 'period', string.format('%d', period), 'created', created)
end
for i = 5, #ARGV - 1, 2 do
  redis.call('HINCRBY', current, 'l:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', current, math.ceil(length * 3 / 1000))

local reply = {count, period, created}
if tonumber(ARGV[4]) ~= period then
  for back = 1, 2 do
    local key = key_of(period - back)
    if holds(key, period - back) then
      reply[#reply + 1] = redis.call('HGETALL', key)
    else
      reply[#reply + 1] = {}
    end
  end
end
return reply
