-- tollgate: part of lua/check.lua, spliced in where it says `-- tollgate:include
-- check_general.inc.lua` (cmake/Redis.cmake) and so in the scope of its locals: the requests
-- that are not plain checks. load_general() defines lease(i, spec), for a lease request (kind
-- 'k'), and general(first, n), for any other (kind 'g'); only a call that has one pays for
-- making them.
local function load_general()
  -- floor(t / window) computed exactly: the double quotient may round across an integer.
  local function window_index(t, window)
    local q = math.floor(t / window)
    local r = t - q * window
    if r < 0 then q = q - 1 elseif r >= window then q = q + 1 end
    return q
  end

  -- A counter's count out of its value (false: none, 0), or nil when it is not a whole number
  -- (INCRBY would refuse it).
  local function count_of(v)
    if not v then return 0 end
    local c = tonumber(v)
    if c and c % 1 == 0 then return c end
    return nil
  end

  -- Item i alone takes ('K') or releases ('L') a lease of the set KEYS[i], as the concurrency
  -- branch of general() decides, with fewer Redis calls (a set that does not exist is neither
  -- pruned nor searched; a lease just taken is the latest of all).
  lease = function(i, spec)
    local set = KEYS[i]
    local _, limit, lease_micros, cost = unpack_d('<Bddd', spec)
    local op, id = byte(spec, 26), string.sub(spec, 27)
    local held = redis.call('ZCARD', set)
    if held > 0 then
      held = held - redis.call('ZREMRANGEBYSCORE', set, '-inf', decimal(now))
    end
    local allowed, reason = 0, 0
    if op == 76 then  -- 'L': applied whatever it finds; reason 3 if the lease was not held
      if held > 0 and redis.call('ZREM', set, id) == 1 then
        held, allowed = held - 1, 1
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
        redis.call('ZADD', set, decimal(now + lease_micros), id)
        redis.call('PEXPIRE', set, decimal(ceil(lease_micros / 1000)))
        -- The lease just taken expires last, and a check that passed waits for nothing.
        put(pack('<Bddd', 1, limit - held - 1, lease_micros, 0))
        return
      end
    end
    -- When slots free: reset_after, until the last lease expires; retry_after, when none is
    -- free, until the lease whose end frees one expires (rank held - limit in expiry order).
    local reset_after, retry_after = 0, 0
    if held > 0 then
      reset_after = tonumber(redis.call('ZRANGE', set, held - 1, held - 1, 'WITHSCORES')[2]) - now
      if held >= limit then
        retry_after =
          tonumber(redis.call('ZRANGE', set, held - limit, held - limit, 'WITHSCORES')[2]) - now
      end
    end
    put(pack('<Bddd', allowed + 2 * reason, limit - held, reset_after, retry_after))
  end

  -- `key`'s value (false: none), or an error for a key of another type.
  local function must(key)
    local v = tent and tent[key]
    if v == nil then v = cache[key] end
    if v == nil then
      local why
      v, why = fetch(key)
      if v == nil then error(why) end
    end
    return v
  end

  -- A charge ('C') or a settle ('S') of rate limit item i, applied at once; puts its record.
  local MAX_DEBT = 4503599627370496  -- kMaxDebtMicros: 2^52 µs
  local function apply(i, p, spec, op)
    local key, code, cost = KEYS[i], p[1], p[4]
    -- `add` units charged, or `give_back` units refunded into the window of `given_at`.
    local add, give_back, given_at, found = 0, 0, now, 0
    if op == 67 then
      add = cost
    else  -- a settle: the reservation's record, then a refund or a charge
      local rkey = key .. ':r:' .. string.sub(spec, 27)
      local raw = redis.call('GET', rkey)
      if not raw then
        found = 3  -- never reserved (forged), or forgotten after its TTL
      elseif byte(raw) ~= 114 then
        found = 4  -- settled already
      else
        local _, reserved, at = unpack_d('<Bdd', raw)
        if cost < reserved then
          give_back, given_at = reserved - cost, at
        else
          add = cost - reserved
        end
        -- Kept as settled until its TTL, so a second settle is told, not applied.
        redis.call('SET', rkey, pack('<Bdd', 115, reserved, at), 'KEEPTTL')
      end
    end
    put(found == 0 and ONE or (found == 3 and '\6' or '\8'))
    if code == 116 then
      local raw = must(key)
      local state = raw and (#raw == 8 and unpack_d('<d', raw) or tonumber(raw)) or nil
      local full, empty_at = now - p[6], nil
      if add > 0 then  -- TokenBucketCharge: at most 2^52 µs of debt
        empty_at = ((state and state > full) and state or full) + add * 1e6 / p[3]
        if empty_at > now + MAX_DEBT then empty_at = now + MAX_DEBT end
      elseif give_back > 0 and state and state > full then  -- TokenBucketRefund
        empty_at = state - give_back * 1e6 / p[3]
        if empty_at < full then empty_at = full end
      end
      if empty_at then
        local value, at = pack('<d', empty_at), bucket_ttl(state, empty_at, p[6])
        if at then
          redis.call('SET', key, value, 'PX', at)
        else
          redis.call('SET', key, value, 'KEEPTTL')
        end
        cache[key] = value
      end
      put(empty_at and pack('<d', empty_at) or (state and pack('<d', state)) or NONE)
      return
    end
    local ckey, pkey = key .. p[6], code == 115 and key .. p[10]
    local craw = must(ckey)
    local current = count_of(craw) or error(ckey .. ' holds no count')
    local previous = pkey and (count_of(must(pkey)) or error(pkey .. ' holds no count')) or 0
    if add > 0 then  -- FixedWindowCharge, SlidingWindowCharge
      if craw then
        redis.call('INCRBY', ckey, decimal(add))
      else
        redis.call('SET', ckey, decimal(add), 'PX', p[11] or counter_ttl(p))
      end
      current = current + add
      cache[ckey] = current
    elseif give_back > 0 then  -- the Refunds: to the window it came from, never below 0
      local at_index = window_index(given_at, p[3])
      local rkey, count = nil, 0
      if at_index == p[8] then
        rkey, count = ckey, current
      elseif pkey and at_index == p[8] - 1 then
        rkey, count = pkey, previous
      end
      if rkey and count > 0 then
        local left = count > give_back and count - give_back or 0
        redis.call('DECRBY', rkey, decimal(count - left))
        cache[rkey] = left
        if rkey == ckey then current = left else previous = left end
      end
    end
    put(current)
    if pkey then
      put(',')
      put(previous)
    end
  end

  -- A concurrency item of a general request (ConcurrencyAcquire, ConcurrencyRelease,
  -- ConcurrencyRenew): the leases held are a sorted set of ids scored by expiry, whose expired
  -- members are forgotten once per set and request; `added` counts per set the leases this
  -- request takes. Puts its record; returns whether it passes.
  local function concurrency(i, p, spec, op, pruned, added)
    local limit, lease_micros, cost = p[2], p[3], p[4]
    local lkey, id = KEYS[i] .. ':l', string.sub(spec, 27)
    if not pruned[lkey] then
      redis.call('ZREMRANGEBYSCORE', lkey, '-inf', decimal(now))
      pruned[lkey] = true
    end
    local tentative = added[lkey] or 0
    local held = redis.call('ZCARD', lkey) + tentative
    local lease_ms = decimal(ceil(lease_micros / 1000))
    local allowed, reason, found = 0, 0, 0
    if op == 76 then  -- release
      local removed = redis.call('ZREM', lkey, id)
      held, found = held - removed, removed == 1 and 0 or 3
    elseif op == 78 then  -- renew: only a lease still held
      if redis.call('ZSCORE', lkey, id) then
        redis.call('ZADD', lkey, 'XX', decimal(now + lease_micros), id)
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
      if cost == 1 then  -- taken if the request passes; every member expires within the TTL
        stage('z', lkey, decimal(now + lease_micros), id, lease_ms)
        added[lkey] = tentative + 1
        tentative, held = tentative + 1, held + 1
      end
    end
    -- The leases in expiry order: the set's, then this request's (now + lease, the latest).
    local function expiry(rank)
      if rank >= held - tentative then return now + lease_micros end
      return tonumber(redis.call('ZRANGE', lkey, rank, rank, 'WITHSCORES')[2])
    end
    local reset_after, retry_after = 0, 0
    if held > 0 then reset_after = expiry(held - 1) - now end
    if held >= limit and not (allowed == 1 and cost == 1) then
      retry_after = expiry(held - limit) - now
    end
    if op == 76 or op == 78 then  -- applied: the decision says so, or why not
      if found ~= 0 then allowed, reason = 0, found else allowed, reason = 1, 0 end
    end
    put(pack('<Bddd', allowed + 2 * reason, limit - held, reset_after, retry_after))
    return allowed == 1
  end

  -- Any other request: items first..first + n - 1 with specs SP[i]. Two rounds: the items that
  -- are not conditional first, applied at once; then the checks and reservations, whose writes
  -- wait for the request's outcome. Records go out in the items' order.
  general = function(first, n)
    tent = {}
    local records, pass, pruned, added = {}, true, {}, {}
    for round = 1, 2 do
      for i = first, first + n - 1 do
        local spec = SP[i]
        local op = #spec > 25 and byte(spec, 26) or 0
        -- 'C' charge, 'S' settle, 'L' release, 'N' renew
        if (op == 67 or op == 83 or op == 76 or op == 78) == (round == 1) then
          local p, mark, ok, why = spec_of(spec), no, true, nil
          if p[1] == 99 then
            ok = concurrency(i, p, spec, op, pruned, added)
          elseif round == 1 then
            apply(i, p, spec, op)
          else
            ok, why = check(i, p, false)
            if ok == nil then error(why) end
            if ok and op == 82 then  -- 'R': the reservation's record, if the request passes
              stage('r', KEYS[i] .. ':r:' .. string.sub(spec, 35), pack('<Bdd', 114, p[4], now),
                    decimal((unpack_d('<d', spec, 27))))
            end
          end
          if not ok and not p[5] then pass = false end
          records[i] = table.concat(out, '', mark + 1, no)
          no = mark
        end
      end
    end
    tent = nil
    if pass then
      local why = commit()
      if why then error(why) end
    end
    nw = 0
    for i = first, first + n - 1 do put(records[i]) end
  end
end
