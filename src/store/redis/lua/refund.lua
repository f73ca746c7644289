-- tollgate: give back what one check.lua call consumed.
--
-- Used only when one request's limits live on several Redis Cluster nodes: check.lua runs
-- on each node for that node's items, and if any node refuses, the nodes that admitted
-- get their consumption back here, so a refused request consumes nothing (docs/redis.md,
-- "Several limits on several nodes"). A give-back never grants more than the check took,
-- and when it cannot tell exactly what to give back it gives nothing: the error is
-- always a transient over-refusal, never an over-admission.
--
-- KEYS[i]   the state key of item i, as in check.lua.
-- ARGV[1]   the `now` that check.lua call used (the first value of its reply), µs.
-- ARGV[1+i] item i, 33 bytes: struct '<Bdddd' = algorithm, a, b, cost as in check.lua,
--           and the item's reset_after_micros from that check's reply. A reservation's item
--           goes on with check.lua's 'R' '<d' ttl_ms, id: its record is deleted too, so what
--           was given back can never be settled (refunded) again. A concurrency check ('c')
--           goes on with 'K' id: the lease it took is removed.
--
-- The rule, per item (cost 0 consumed nothing):
--   token bucket   the check wrote empty_at = e, with reset_after = ceil(e + fill - now).
--                  If the key still holds e (within the rounding of reset_after), nothing
--                  else was consumed since, and e - cost / rate is restored (KEEPTTL).
--                  Otherwise it is left as is: later checks clamped to a full bucket may
--                  have happened in between, and a plain subtraction could then hand out
--                  tokens that refill already gave.
--   fixed/sliding  DECRBY cost on the counter of the window that `now` fell in, if it
--                  still holds at least cost (counts add up, so this is exact).
--
-- Returns the number of items given back.

local now = tonumber(ARGV[1])

local function window_index(t, window)
  local q = math.floor(t / window)
  local r = t - q * window
  if r < 0 then q = q - 1 elseif r >= window then q = q + 1 end
  return q
end

local refunded = 0
for i = 1, #KEYS do
  local code, a, b, cost, reset_after = struct.unpack('<Bdddd', ARGV[1 + i])
  local algorithm = string.char(code)
  local key = KEYS[i]
  local arg = ARGV[1 + i]
  if #arg > 33 and string.byte(arg, 34) == 82 then  -- 'R'
    redis.call('DEL', key .. ':r:' .. string.sub(arg, 43))
  end
  if code == 99 then  -- 'c': the lease this check took ('K' id) is released
    if #arg > 33 and string.byte(arg, 34) == 75 then
      refunded = refunded + redis.call('ZREM', key .. ':l', string.sub(arg, 35))
    end
  elseif cost > 0 then
    if algorithm == 't' then
      local capacity, rate = a, b
      local fill_time = capacity * 1e6 / rate
      local per_token = 1e6 / rate
      local written = now + reset_after - fill_time  -- e rounded up to a whole µs
      local raw = redis.call('GET', key)
      local state  -- a binary double (or the decimal text of earlier versions), as in check.lua
      if raw then
        if #raw == 8 then state = struct.unpack('<d', raw) else state = tonumber(raw) end
      end
      -- Another consumption since would have moved the state by at least per_token; only
      -- tell them apart when that is well above the rounding of reset_after.
      if state and per_token > 4 and state > written - 1.5 and state <= written + 0.5 then
        redis.call('SET', key, struct.pack('<d', state - cost * 1e6 / rate), 'KEEPTTL')
        refunded = refunded + 1
      end
    elseif algorithm == 'f' or algorithm == 's' then
      local wkey = key .. ':' .. string.format('%d', window_index(now, b))
      local count = tonumber(redis.call('GET', wkey) or '')
      if count and count >= cost then
        redis.call('DECRBY', wkey, cost)
        refunded = refunded + 1
      end
    else
      return redis.error_reply('tollgate: unknown algorithm ' .. tostring(algorithm))
    end
  end
end

return refunded
