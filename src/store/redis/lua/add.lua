-- tollgate: add consumption that happened elsewhere (reconciliation), without checking.
--
-- Used when Redis returns after an outage: what an instance admitted from its local
-- fallback is added to the shared state so a user who spent the budget during the outage
-- does not get a second one (docs/resilience.md, "Reconciliation"). Each item is applied
-- on its own; all items in one atomic step.
--
-- KEYS[i]   the state key of item i, as in check.lua (<prefix><limit name>:{<key>}).
-- ARGV[1]   "" in production: time comes from Redis TIME; tests may pin it (µs).
-- ARGV[1+i] item i, 33 bytes: struct '<Bdddd' = algorithm, a, b, cost, age, where the
--           first four are as in check.lua and age is how long ago (µs, >= 0) the consumption
--           happened, measured by the sender: at = now - age. An age rather than a time
--           so the sender's and Redis' clocks need not agree.
--
-- The rule, per item:
--   token bucket   cost is capped at capacity; empty_at = max(state, at - fill_time)
--                  + cost / rate, written (with check.lua's TTL) only if it is later than
--                  now - fill_time (otherwise the bucket has refilled since). It may pass
--                  now: the bucket is in debt and the key waits for the refill.
--   fixed window   INCRBY the counter of the window containing `at`, only if that window
--                  is the current one.
--   sliding window INCRBY the counter of the window containing `at`, only if it is the
--                  current or the previous one (both still weigh in the estimate).
--   Every counter write sets the TTL check.lua would (PEXPIRE NX keeps an existing one).
--
-- Returns the number of items applied (the rest were for windows already over).

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- floor(t / window) computed exactly, as in check.lua.
local function window_index(t, window)
  local q = math.floor(t / window)
  local r = t - q * window
  if r < 0 then q = q - 1 elseif r >= window then q = q + 1 end
  return q
end

local applied = 0
for i = 1, #KEYS do
  local code, a, b, cost, age = struct.unpack('<Bdddd', ARGV[1 + i])
  local algorithm = string.char(code)
  if age < 0 then age = 0 end
  local at = now - age
  local key = KEYS[i]

  if cost > 0 then
    if algorithm == 't' then
      local capacity, rate = a, b
      if cost > capacity then cost = capacity end
      local fill_time = capacity * 1e6 / rate
      local empty_at = at - fill_time
      local raw = redis.call('GET', key)
      local state  -- a binary double (or the decimal text of earlier versions), as in check.lua
      if raw then
        if #raw == 8 then state = struct.unpack('<d', raw) else state = tonumber(raw) end
      end
      if state and state > empty_at then empty_at = state end
      empty_at = empty_at + cost * 1e6 / rate
      if empty_at > now - fill_time then
        local ttl = math.ceil((empty_at + fill_time - now) / 1000) + 1000
        redis.call('SET', key, struct.pack('<d', empty_at), 'PX', ttl)
        applied = applied + 1
      end

    elseif algorithm == 'f' or algorithm == 's' then
      local window = b
      local index = window_index(at, window)
      local current = window_index(now, window)
      local oldest = current
      local lifetime = 1  -- windows the counter matters for, counted from its own
      if algorithm == 's' then
        oldest = current - 1
        lifetime = 2
      end
      if index >= oldest and index <= current then
        local wkey = key .. ':' .. string.format('%d', index)
        redis.call('INCRBY', wkey, cost)
        local ttl = math.ceil(((index + lifetime) * window - now) / 1000)
        redis.call('PEXPIRE', wkey, math.max(ttl, 1), 'NX')
        applied = applied + 1
      end

    else
      return redis.error_reply('tollgate: unknown algorithm ' .. tostring(algorithm))
    end
  end
end

return applied
