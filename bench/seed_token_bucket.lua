-- The seed's token bucket (seed/limits-across-many-servers.txt, "Token bucket, and the
-- read-then-write race"), verbatim: the ceiling that bench/compare.py runs with redis-benchmark.
-- KEYS[1] = bucket key, ARGV[1] = capacity, ARGV[2] = refill per second
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local b = redis.call('HMGET', KEYS[1], 'tokens', 'last')
local tokens = tonumber(b[1]) or capacity
local last = tonumber(b[2]) or now

tokens = math.min(capacity, tokens + (now - last) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end

redis.call('HSET', KEYS[1], 'tokens', tokens, 'last', now)
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return allowed
