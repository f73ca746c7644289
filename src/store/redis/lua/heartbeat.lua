-- tollgate: one heartbeat of one instance (docs/resilience.md, "N, the number of live
-- instances"), atomic in Redis, on Redis' own clock so the instances' clocks do not matter.
--
-- KEYS[1]   the sorted set of live instances (member: instance id, score: last heartbeat,
--           Redis TIME in µs).
-- ARGV[1]   this instance's id.      ARGV[2]  how long an instance stays counted, in µs.
--
-- Adds or refreshes this instance, drops members not heard from for ARGV[2], sets the set's
-- TTL to twice that (in whole milliseconds), and returns the number of live instances.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) * 2)
return redis.call('ZCARD', KEYS[1])
