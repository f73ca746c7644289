-- tollgate: check N limits in one atomic step, all or nothing.
--
-- KEYS[i]   the state key of limit i: <prefix><limit name>:{<key>}. Window limits keep
--           their counters in <KEYS[i]>:<window index>, which shares KEYS[i]'s hash tag
--           and so its cluster slot.
-- ARGV[1]   "" in production: time comes from Redis TIME. Tests of the shared decision
--           table pass integer microseconds here to pin the time.
-- ARGV[1+i] limit i, 25 bytes: struct '<Bddd' = algorithm, a, b, cost, where algorithm is
--           the byte 't' (token bucket: a = capacity, b = refill per second), 'f' (fixed
--           window) or 's' (sliding window: a = limit, b = window µs), and the numbers are
--           little-endian IEEE doubles (exact for whole numbers up to 2^53). The byte in
--           upper case ('T', 'F', 'S') marks a shadow item: it never refuses the batch; the
--           batch's writes are those of its allowed items, made when every other item
--           passes.
--           An item that is not a plain check (Store::ApplyAsync, tollgate/store.h's ItemOp)
--           has one more byte, its op, and its fields:
--             'C'                       a charge (applied in full, never refused)
--             'R' '<d' ttl_ms, id       a reservation: a check that, if the batch passes,
--                                       writes <KEYS[i]>:r:<id> = '<Bdd' ('r', cost, now),
--                                       PX ttl_ms
--             'S' id                    a settle of reservation <id> at the actual cost: a
--                                       refund into the window it came from, or a charge of
--                                       the extra; its record becomes 's' (KEEPTTL). Reason 3:
--                                       no record (forged, expired); 4: settled already.
--           A concurrency limit is algorithm 'c' (a = limit, b = lease µs); its leases are the
--           sorted set <KEYS[i]>:l (member: lease id, score: expiry µs), PEXPIRE'd to one
--           lease time on every ZADD. A check of cost 1 takes a slot:
--             'K' id                    the lease to add (ZADD), if the batch passes
--             'L' id                    a release (ZREM); reason 3 if not held
--             'N' id                    a renewal (ZADD XX now + lease); reason 3 if not held
--           A call of one such item taking ('K') or releasing ('L') its slot goes to lease.lua
--           instead, which decides alike at fewer Redis calls.
--
-- Items that are not conditional (charges, settles, releases, renewals) are applied first, in
-- order, whatever the batch does; then the checks are decided on what they leave, all or
-- nothing.
--
-- Returns one string, struct '<d' + N × '<Bddd': now_micros, then per limit: flags
-- (allowed + 2 × reason; reason 0 none, 1 over limit, 2 cost exceeds limit, 3 not found, 4
-- settled already), remaining
-- (negative: the limit is in debt by that much, after a charge), reset_after_micros,
-- retry_after_micros.
--
-- Binary in, binary out, and a token bucket's state a binary double (8 bytes; a value of
-- another length is read as the decimal text of earlier versions), for what a call costs
-- Redis (docs/redis.md, "What a check costs Redis", has the measurement).
--
-- The arithmetic mirrors src/algorithm/*.h expression by expression (IEEE doubles on
-- integer microseconds, same order), so both compute bit-identical decisions. Every
-- decision is made first; state is written only if every limit passed, and every key gets
-- its TTL in the same atomic step that creates it (a token bucket's SET sets it on every
-- write; a window counter's PEXPIRE comes with the INCRBY that creates it).

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- One token bucket alone, the most common call: the same expressions as the token bucket
-- branch of the general loop below, without its tables and closures. Both paths must
-- decide alike (redis_store_test runs the algorithm table through each).
if #KEYS == 1 and string.byte(ARGV[2]) == 116 and #ARGV[2] == 25 then  -- 't', a check
  local capacity, rate, cost = struct.unpack('<ddd', ARGV[2], 2)
  local key = KEYS[1]
  local fill_time = capacity * 1e6 / rate
  local empty_at = now - fill_time
  local raw = redis.call('GET', key)
  local state
  if raw then
    if #raw == 8 then state = struct.unpack('<d', raw) else state = tonumber(raw) end
  end
  if state and state > empty_at then empty_at = state end
  local allowed, retry_after, reason = 0, 0, 0
  if cost > capacity then
    reason = 2
  else
    local next_empty_at = empty_at + cost * 1e6 / rate
    if next_empty_at <= now then
      allowed = 1
      if cost > 0 then
        empty_at = next_empty_at
      else
        local one = empty_at + 1 * 1e6 / rate  -- a peek: when a cost of 1 would pass
        if one > now then retry_after = math.ceil(one - now) end
      end
    else
      reason = 1
      -- A refused peek (the bucket is in debt) says when a cost of 1 would pass.
      local wait = (cost == 0 and empty_at + 1 * 1e6 / rate or next_empty_at) - now
      if wait > 0 then retry_after = math.ceil(wait) end
    end
  end
  -- Negative: a debt (WholeTokens).
  local tokens = math.floor((now - empty_at) * (rate / 1e6) + 1e-6)
  if tokens > capacity then tokens = capacity end
  local reset_after = empty_at + fill_time - now
  if reset_after > 0 then reset_after = math.ceil(reset_after) else reset_after = 0 end
  if allowed == 1 and cost > 0 then
    redis.call('SET', key, struct.pack('<d', empty_at), 'PX', math.ceil(reset_after / 1000) + 1000)
  end
  return struct.pack('<dBddd', now, allowed + 2 * reason, tokens, reset_after, retry_after)
end

-- Ceiling of a non-negative double to whole microseconds (CeilMicros).
local function ceil_micros(x)
  if not (x > 0) then return 0 end
  return math.ceil(x)
end

-- floor(now / window) computed exactly: the double quotient may round across an integer.
local function window_index(t, window)
  local q = math.floor(t / window)
  local r = t - q * window
  if r < 0 then q = q - 1 elseif r >= window then q = q + 1 end
  return q
end

-- The fixed window's decision on a window holding `count`, `until_end` µs before it ends
-- (FixedWindowCheck). Returns allowed, reason, the count after, retry_after.
local function fixed_window(count, cost, limit, until_end)
  if cost > limit then return 0, 2, count, 0 end
  if count + cost <= limit then
    if cost == 0 and count + 1 > limit then return 1, 0, count, until_end end  -- a spent peek
    return 1, 0, count + cost, 0
  end
  return 0, 1, count, until_end  -- the next window starts empty and cost <= limit
end

-- The sliding window's decision in window `index` whose counter holds `current`, the one
-- before `previous` (SlidingWindowCheck). Returns allowed, reason, the current count after,
-- remaining, reset_after, retry_after.
-- How long until `cost` passes when it does not now (internal::RetryAfter): in this window
-- once the previous window's weight has shrunk enough, else in the next one.
local function sliding_retry_after(previous, current, cost, limit, elapsed, window)
  local w = window
  if current + cost <= limit then
    local needed_elapsed = w - (limit - current - cost) * w / previous
    return ceil_micros(needed_elapsed - elapsed) + 1
  end
  local needed_elapsed = w - (limit - cost) * w / current
  return (window - elapsed) + ceil_micros(needed_elapsed) + 1
end

local function sliding_window(previous, current, cost, limit, window, index)
  local elapsed = now - index * window
  local weight = (window - elapsed) * (1 / window)
  local allowed, reason, retry_after = 0, 0, 0
  local estimate = previous * weight + current
  if cost > limit then
    reason = 2
  elseif estimate + cost <= limit then
    allowed = 1
    current = current + cost
    if cost == 0 and estimate + 1 > limit then  -- a peek: when a cost of 1 would pass
      retry_after = sliding_retry_after(previous, current, 1, limit, elapsed, window)
    end
  else
    reason = 1
    -- A refused peek (the estimate is past the limit) says when a cost of 1 would pass.
    retry_after = sliding_retry_after(previous, current, cost == 0 and 1 or cost, limit, elapsed,
                                      window)
  end
  local remaining = math.floor(limit - (previous * weight + current) + 1e-6)  -- < 0: a debt
  local reset_after = 0
  if current > 0 then
    reset_after = (index + 2) * window - now
  elseif previous > 0 then
    reset_after = (index + 1) * window - now
  end
  return allowed, reason, current, remaining, reset_after, retry_after
end

-- One window limit alone: the general loop's decisions (the functions above), without its
-- tables and with fewer Redis calls: a counter's TTL is set by the write that creates it
-- (GET found no key), not on every write, and a sliding window reads both counters with
-- one MGET.
local code = #KEYS == 1 and #ARGV[2] == 25 and string.byte(ARGV[2])
if code == 102 or code == 115 then  -- one check alone, 'f' or 's'
  local limit, window, cost = struct.unpack('<ddd', ARGV[2], 2)
  local index = window_index(now, window)
  local ckey = KEYS[1] .. ':' .. string.format('%d', index)
  local allowed, reason, after, remaining, reset_after, retry_after, created, ttl_end
  if code == 102 then
    local raw = redis.call('GET', ckey)
    local count = tonumber(raw or '') or 0
    local window_end = (index + 1) * window
    allowed, reason, after, retry_after = fixed_window(count, cost, limit, window_end - now)
    remaining, reset_after = limit - after, window_end - now
    created, ttl_end = not raw, window_end
  else
    local counts = redis.call('MGET', ckey, KEYS[1] .. ':' .. string.format('%d', index - 1))
    allowed, reason, after, remaining, reset_after, retry_after =
      sliding_window(tonumber(counts[2] or '') or 0, tonumber(counts[1] or '') or 0, cost,
                     limit, window, index)
    -- The counter matters until the end of the next window.
    created, ttl_end = not counts[1], (index + 2) * window
  end
  if allowed == 1 and cost > 0 then
    redis.call('INCRBY', ckey, cost)
    if created then
      redis.call('PEXPIRE', ckey, math.max(math.ceil((ttl_end - now) / 1000), 1))
    end
  end
  return struct.pack('<dBddd', now, allowed + 2 * reason, remaining, reset_after, retry_after)
end

-- State read so far in this call, including what earlier limits of the same call would
-- consume, so that a key checked twice in one call sees its own first use.
local pending = {}
-- A window's counter (decimal, as INCRBY keeps it).
local function read(key)
  local v = pending[key]
  if v == nil then
    v = tonumber(redis.call('GET', key) or '') or false
    pending[key] = v
  end
  return v
end
-- A token bucket's empty-at time: a binary double (or the decimal text of earlier versions).
local function read_bucket(key)
  local v = pending[key]
  if v == nil then
    local raw = redis.call('GET', key)
    if raw and #raw == 8 then v = struct.unpack('<d', raw) else v = tonumber(raw or '') or false end
    pending[key] = v
  end
  return v
end

local writes = {}  -- ordered list of { kind, key, value, ttl_ms }, made if all pass
local out = { struct.pack('<d', now) }
local all_allowed = true
local MAX_DEBT = 4503599627370496  -- kMaxDebtMicros: 2^52 µs
local pruned, added  -- concurrency: sets pruned in this call, leases taken per set

-- Two passes: the items that are not conditional (charges, settles) first, applied at once;
-- then the checks (and reservations), whose writes wait for the batch's outcome.
local n = #KEYS
for pass = 1, 2 do
  for i = 1, n do
    local arg = ARGV[1 + i]
    local op = #arg > 25 and string.byte(arg, 26) or 0
    -- 'C' charge, 'S' settle, 'L' release, 'N' renew
    local unconditional = op == 67 or op == 83 or op == 76 or op == 78
    if unconditional == (pass == 1) then
      local code, a, b, cost = struct.unpack('<Bddd', arg)
      -- An upper-case algorithm byte marks a shadow item: decided and, when allowed, counted,
      -- but it never refuses the batch.
      local shadow = code < 97
      if shadow then code = code + 32 end
      local algorithm = string.char(code)
      local key = KEYS[i]
      local allowed, remaining, reset_after, retry_after, reason = 0, 0, 0, 0, 0
      -- What an unconditional item does to the state before it is decided as a peek (cost 0)
      -- at what it leaves: `add` units charged, or `give_back` units refunded into the window
      -- of `given_at`; `found` is a settle's reason when it has nothing to settle.
      local add, give_back, given_at, found = 0, 0, now, 0
      local check_cost = cost
      if op == 67 then
        add, check_cost = cost, 0
      elseif op == 83 then  -- settle: the reservation's record, then a refund or a charge
        check_cost = 0
        local rkey = key .. ':r:' .. string.sub(arg, 27)
        local raw = redis.call('GET', rkey)
        if not raw then
          found = 3  -- never reserved (forged), or forgotten after its TTL
        elseif string.byte(raw) ~= 114 then
          found = 4  -- settled already
        else
          local _, reserved, at = struct.unpack('<Bdd', raw)
          if cost < reserved then give_back, given_at = reserved - cost, at else add = cost - reserved end
          -- Kept as settled until its TTL, so a second settle is told, not applied.
          redis.call('SET', rkey, struct.pack('<Bdd', 115, reserved, at), 'KEEPTTL')
        end
      end

      if algorithm == 't' then
        local capacity, rate = a, b
        local fill_time = capacity * 1e6 / rate
        local empty_at = now - fill_time
        local state = read_bucket(key)
        if state and state > empty_at then empty_at = state end
        local wrote = false
        if add > 0 then  -- TokenBucketCharge: at most 2^52 µs of debt
          empty_at = empty_at + add * 1e6 / rate
          local most = now + MAX_DEBT
          if empty_at > most then empty_at = most end
          pending[key], wrote = empty_at, true
        elseif give_back > 0 and state and state > now - fill_time then  -- TokenBucketRefund
          empty_at = state - give_back * 1e6 / rate
          if empty_at < now - fill_time then empty_at = now - fill_time end
          pending[key], wrote = empty_at, true
        end
        if check_cost > capacity then
          reason = 2
        else
          local next_empty_at = empty_at + check_cost * 1e6 / rate
          if next_empty_at <= now then
            allowed = 1
            if check_cost > 0 then
              empty_at = next_empty_at
              pending[key] = next_empty_at
              writes[#writes + 1] = { 't', key, next_empty_at, 0 }
            else
              retry_after = ceil_micros(empty_at + 1 * 1e6 / rate - now)  -- a peek: cost 1's wait
            end
          else
            reason = 1
            if check_cost == 0 then  -- a refused peek: when a cost of 1 would pass
              retry_after = ceil_micros(empty_at + 1 * 1e6 / rate - now)
            else
              retry_after = ceil_micros(next_empty_at - now)
            end
          end
        end
        local tokens = math.floor((now - empty_at) * (rate / 1e6) + 1e-6)  -- < 0: a debt
        if tokens > capacity then tokens = capacity end
        remaining = tokens
        reset_after = ceil_micros(empty_at + fill_time - now)
        -- Expire once full again (a missing key is a full bucket), plus a second of margin.
        local ttl = math.ceil(reset_after / 1000) + 1000
        if allowed == 1 and check_cost > 0 then writes[#writes][4] = ttl end
        if wrote then redis.call('SET', key, struct.pack('<d', empty_at), 'PX', ttl) end

      elseif algorithm == 'f' then
        local limit, window = a, b
        local index = window_index(now, window)
        local wkey = key .. ':' .. string.format('%d', index)
        local count = read(wkey) or 0
        local window_end = (index + 1) * window
        if add > 0 then  -- FixedWindowCharge
          redis.call('INCRBY', wkey, add)
          if pending[wkey] == false then
            redis.call('PEXPIRE', wkey, math.max(math.ceil((window_end - now) / 1000), 1))
          end
          count = count + add
          pending[wkey] = count
        elseif give_back > 0 and count > 0 and window_index(given_at, window) == index then
          local left = count > give_back and count - give_back or 0  -- FixedWindowRefund
          redis.call('DECRBY', wkey, count - left)
          count = left
          pending[wkey] = left
        end
        local after
        allowed, reason, after, retry_after = fixed_window(count, check_cost, limit, window_end - now)
        remaining, reset_after = limit - after, window_end - now  -- remaining < 0: a debt
        if allowed == 1 and check_cost > 0 then
          -- The counter's TTL is set by the write that creates it (no key before this call,
          -- nor an earlier write in it: pending[wkey] is still false); later writes keep it.
          local ttl = pending[wkey] == false and math.ceil((window_end - now) / 1000)
          pending[wkey] = after
          writes[#writes + 1] = { 'i', wkey, check_cost, ttl }
        end

      elseif algorithm == 's' then
        local limit, window = a, b
        local index = window_index(now, window)
        local ckey = key .. ':' .. string.format('%d', index)
        local pkey = key .. ':' .. string.format('%d', index - 1)
        local current = read(ckey) or 0
        local previous = read(pkey) or 0
        if add > 0 then  -- SlidingWindowCharge
          redis.call('INCRBY', ckey, add)
          if pending[ckey] == false then
            redis.call('PEXPIRE', ckey, math.max(math.ceil(((index + 2) * window - now) / 1000), 1))
          end
          current = current + add
          pending[ckey] = current
        elseif give_back > 0 then  -- SlidingWindowRefund: to the window it came from
          local at_index = window_index(given_at, window)
          if at_index == index and current > 0 then
            local left = current > give_back and current - give_back or 0
            redis.call('DECRBY', ckey, current - left)
            current = left
            pending[ckey] = left
          elseif at_index == index - 1 and previous > 0 then
            local left = previous > give_back and previous - give_back or 0
            redis.call('DECRBY', pkey, previous - left)
            previous = left
            pending[pkey] = left
          end
        end
        local after
        allowed, reason, after, remaining, reset_after, retry_after =
          sliding_window(previous, current, check_cost, limit, window, index)
        if allowed == 1 and check_cost > 0 then
          -- As for the fixed window; the counter matters until the end of the next window.
          local ttl = pending[ckey] == false and math.ceil(((index + 2) * window - now) / 1000)
          pending[ckey] = after
          writes[#writes + 1] = { 'i', ckey, check_cost, ttl }
        end

      elseif algorithm == 'c' then
        -- ConcurrencyAcquire, ConcurrencyRelease, ConcurrencyRenew: the leases held, as a sorted
        -- set of ids scored by expiry. Scores go as decimal integers (Lua's own conversion
        -- rounds to 14 digits).
        local limit, lease = a, b
        local lkey = key .. ':l'
        local id = string.sub(arg, 27)
        pruned = pruned or {}
        added = added or {}
        if not pruned[lkey] then  -- the expired leases are forgotten once per key and call
          redis.call('ZREMRANGEBYSCORE', lkey, '-inf', string.format('%d', now))
          pruned[lkey] = true
        end
        local tentative = added[lkey] or 0  -- taken by earlier checks of this call
        local held = redis.call('ZCARD', lkey) + tentative
        local lease_ms = math.ceil(lease / 1000)
        if op == 76 then  -- release
          local removed = redis.call('ZREM', lkey, id)
          held = held - removed
          found = removed == 1 and 0 or 3
        elseif op == 78 then  -- renew: only a lease still held
          if redis.call('ZSCORE', lkey, id) then
            redis.call('ZADD', lkey, 'XX', string.format('%d', now + lease), id)
            redis.call('PEXPIRE', lkey, lease_ms)
          else
            found = 3
          end
        elseif cost > 1 or cost > limit then
          reason = 2
        elseif held + cost > limit then
          reason = 1
        else
          allowed = 1
          if cost == 1 then  -- taken if the batch passes; every member expires within the TTL
            writes[#writes + 1] = { 'z', lkey, string.format('%d', now + lease), id, lease_ms }
            added[lkey] = tentative + 1
            tentative = tentative + 1
            held = held + 1
          end
        end
        remaining = limit - held  -- < 0: held beyond the limit (a debt)
        -- The leases in expiry order: the set's, then this call's tentative ones (now + lease,
        -- the latest of all).
        local stored = held - tentative
        local function expiry(rank)
          if rank >= stored then return now + lease end
          local member = redis.call('ZRANGE', lkey, rank, rank, 'WITHSCORES')
          return tonumber(member[2])
        end
        if held > 0 then reset_after = expiry(held - 1) - now end
        if held >= limit and not (allowed == 1 and cost == 1) then
          retry_after = expiry(held - limit) - now
        end

      else
        return redis.error_reply('tollgate: unknown algorithm ' .. tostring(algorithm))
      end

      if unconditional then
        -- Applied: the decision says what it leaves (a settle with nothing to settle, why).
        if found ~= 0 then allowed, reason = 0, found else allowed, reason = 1, 0 end
      else
        if allowed == 0 and not shadow then all_allowed = false end
        if op == 82 and allowed == 1 then  -- 'R': the reservation's record, if all pass
          local ttl_ms = struct.unpack('<d', arg, 27)
          writes[#writes + 1] = { 'r', key .. ':r:' .. string.sub(arg, 35),
                                  struct.pack('<Bdd', 114, cost, now), ttl_ms }
        end
      end
      out[1 + i] = struct.pack('<Bddd', allowed + 2 * reason, remaining, reset_after, retry_after)
    end
  end
end

if all_allowed then
  for _, w in ipairs(writes) do
    if w[1] == 't' then
      redis.call('SET', w[2], struct.pack('<d', w[3]), 'PX', w[4])
    elseif w[1] == 'r' then
      redis.call('SET', w[2], w[3], 'PX', w[4])
    elseif w[1] == 'z' then
      redis.call('ZADD', w[2], w[3], w[4])
      redis.call('PEXPIRE', w[2], w[5])
    else
      redis.call('INCRBY', w[2], w[3])
      if w[4] then redis.call('PEXPIRE', w[2], math.max(w[4], 1)) end
    end
  end
end

return table.concat(out)
