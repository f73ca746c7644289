-- tollgate: the requests of one flush in one atomic script call. Each request is all or
-- nothing, decided in order on what the requests before it in the call left.
--
-- KEYS[i]   item i's state key, <prefix><limit name>:{<key>} (a window limit keeps its
--           counters in <KEYS[i]>:<window index>, a concurrency limit its leases in the sorted
--           set <KEYS[i]>:l; all share its hash tag, so its cluster slot), or for a lease
--           request (kind 'k') that sorted set itself.
-- ARGV[1]   "" in production: time comes from Redis TIME, read once per call. Tests of the
--           shared decision table pass integer microseconds here to pin the time.
-- Then one request alone: ARGV[1 + i] is item i's spec; or a batch: ARGV[2] is the layout
-- and ARGV[2 + j] spec j, each distinct spec once. The layout is a list of entries (starting
-- with a kind, never an algorithm's letter), each for the requests of the next items in order:
--   kind n j1..jn   one request of n items (1..255) with specs j1..jn
--   'P' m j         m requests (1..255) of one plain check each, all with spec j
-- A request's kind: 'p' plain checks of rate limits (no op, not in shadow mode); 'k' one
-- concurrency item taking ('K') or releasing ('L') a lease, not in shadow mode; 'g' any
-- other. A request alone is classified the same way here.
--
-- A spec is struct '<Bddd' = algorithm, a, b, cost (little-endian doubles, exact for whole
-- numbers up to 2^53): 't' token bucket (a = capacity, b = refill per second), 'f' fixed or
-- 's' sliding window (a = limit, b = window µs), 'c' concurrency (a = limit, b = lease µs). In
-- upper case ('T', 'F', 'S') a shadow item: it never refuses its request; the request's writes
-- are its allowed items', made when every other item passes. An item that is not a plain
-- check (tollgate/store.h's ItemOp) has one more byte, its op, and its fields:
--   'C'                 a charge (applied in full, never refused)
--   'R' '<d' ttl_ms id  a reservation: a check that, if its request passes, writes
--                       <KEYS[i]>:r:<id> = '<Bdd' ('r', cost, now), PX ttl_ms
--   'S' id              a settle of reservation <id> at the actual cost: a refund into the
--                       window it came from, or a charge of the extra; its record becomes 's'
--                       (KEEPTTL). Reason 3: no record (forged, expired); 4: settled already.
--   'K' id              a concurrency check of cost 1: the lease to add if the request passes
--   'L' id / 'N' id     a release (ZREM) / a renewal (ZADD XX now + lease); 3 if not held
-- Items that are not conditional (charges, settles, releases, renewals) are applied first, in
-- order, whatever their request does; then the checks are decided on what they leave.
--
-- Returns one string: struct '<d' now_micros, then per request its items' records in order,
-- or for a request of a batch that failed (a counter that holds no count, a key of another
-- type) one record: byte 255, struct '<H' length, the message; the other requests go on. A
-- rate limit's record is a byte (1 allowed, 0 refused; a settle with nothing to settle 6 not
-- found, 8 settled already) and the state its decision is made on (what a check found, what
-- a charge or settle left):
--   't'  8 bytes, '<d' the time the bucket is empty (-inf: none, a full bucket)
--   'f'  the window's count in decimal ('': none)
--   's'  the current window's count, ',', the previous window's ('': none)
-- from which the caller computes the decision's numbers with src/algorithm. Whether a check
-- passes, and what it writes, is computed here with the same expressions in the same order
-- (IEEE doubles on integer microseconds), so both agree bit for bit; the caller checks that
-- they agree on every item. A concurrency item's record is struct '<Bddd': flags (allowed +
-- 2 × reason: 1 over limit, 2 cost exceeds limit, 3 not held), remaining (< 0: held beyond
-- the limit), reset_after_micros, retry_after_micros.
--
-- Every key gets its TTL in the step that creates it: a counter's SET ... PX until its window
-- ends (a sliding window's: the next one); a bucket's SET ... PX until the end of the second
-- in which it is full again, plus a second, which later writes leaving it full within that
-- same second keep (KEEPTTL). State is binary (a bucket's 8-byte double; a value of another
-- length is the decimal text of earlier versions), and a batch's plain checks read in one
-- MGET: what a check costs Redis is in docs/redis.md, "What a check costs Redis".

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local byte, unpack_d, pack, ceil, format = string.byte, struct.unpack, struct.pack, math.ceil,
                                          string.format
local NOW, ZERO, ONE = pack('<d', now), '\0', '\1'
local NONE = '\0\0\0\0\0\0\240\255'  -- pack('<d', -math.huge): no bucket state

-- One plain check alone, the most common call, decided inline: the decisions of check() below
-- without its tables and closures. Both must decide alike (redis_store_test runs the
-- algorithms' tables through each).
if #KEYS == 1 and #ARGV == 2 and #ARGV[2] == 25 then
  local code, a, b, cost = unpack_d('<Bddd', ARGV[2])
  local key = KEYS[1]
  if code == 116 then
    local fill, raw, state, record = a * 1e6 / b, redis.call('GET', key), nil, NONE
    if raw then
      if #raw == 8 then
        state, record = unpack_d('<d', raw), raw
      else
        state = tonumber(raw)  -- the decimal text of earlier versions
        if state then record = pack('<d', state) end
      end
    end
    local empty_at = now - fill
    if state and state > empty_at then empty_at = state end
    local next_empty_at = empty_at + cost * 1e6 / b
    if cost > a or next_empty_at > now then return NOW .. ZERO .. record end
    if cost > 0 then
      local second = ceil((next_empty_at + fill) / 1e6)
      if state and ceil((state + fill) / 1e6) == second then
        redis.call('SET', key, pack('<d', next_empty_at), 'KEEPTTL')
      else
        redis.call('SET', key, pack('<d', next_empty_at), 'PX',
                   format('%d', (second + 1) * 1000 - math.floor(now / 1000)))
      end
    end
    return NOW .. ONE .. record
  elseif code == 102 or code == 115 then
    local index = math.floor(now / b)  -- floor(now / b) exactly, as window_index() below
    local r = now - index * b
    if r < 0 then index = index - 1 elseif r >= b then index = index + 1 end
    local ckey, craw, praw = key .. ':' .. format('%d', index), nil, nil
    if code == 102 then
      craw = redis.call('GET', ckey)
    else
      local both = redis.call('MGET', ckey, key .. ':' .. format('%d', index - 1))
      craw, praw = both[1], both[2]
    end
    local current, previous = tonumber(craw or 0), tonumber(praw or 0)
    if not (current and previous) then return redis.error_reply('tollgate: ' .. key .. ' holds no count') end
    local estimate, ends = current, (index + 1) * b  -- a counter matters until its window
    if code == 115 then                               -- ends, or the next one
      estimate, ends = previous * ((b - (now - index * b)) * (1 / b)) + current, ends + b
    end
    local pass = cost <= a and estimate + cost <= a
    if pass and cost > 0 then
      if craw then
        redis.call('INCRBY', ckey, format('%d', cost))
      else
        redis.call('SET', ckey, format('%d', cost), 'PX', format('%d', math.max(ceil((ends - now) / 1000), 1)))
      end
    end
    if code == 102 then return NOW .. (pass and ONE or ZERO) .. (craw or '') end
    return NOW .. (pass and ONE or ZERO) .. (craw or '') .. ',' .. (praw or '')
  end
end

local out, no = { NOW }, 1  -- the reply's pieces, and how many
local cache = {}  -- key -> its value as this call left it: a string, a count, or false (none)
local tent  -- while a request of several items is decided: key -> its tentative value
local ckeys = {}  -- item -> its window counter's key, when read ahead
local W, nw = {}, 0  -- staged writes, 5 slots each (stage)
local function decimal(x) return format('%d', x) end
local function put(piece)
  no = no + 1
  out[no] = piece
end

-- floor(t / window) computed exactly: the double quotient may round across an integer.
local function window_index(t, window)
  local q = math.floor(t / window)
  local r = t - q * window
  if r < 0 then q = q - 1 elseif r >= window then q = q + 1 end
  return q
end

-- A spec's numbers, and what this call's time makes of them, once per distinct spec.
local specs = {}
local function spec_of(spec)
  local p = specs[spec]
  if p then return p end
  local code, a, b, cost = unpack_d('<Bddd', spec)
  local shadow = code < 97
  if shadow then code = code + 32 end
  p = { code = code, shadow = shadow, a = a, b = b, cost = cost, fill = false, step = false,
        index = false, suffix = false, psuffix = false, count = false, weight = false,
        ttl = false }
  if code == 116 then
    p.fill, p.step = a * 1e6 / b, cost * 1e6 / b
  elseif code == 102 or code == 115 then
    local index = window_index(now, b)
    p.index, p.suffix, p.count = index, ':' .. decimal(index), cost == 1 and '1' or decimal(cost)
    local ends = (index + 1) * b  -- a counter matters until its window ends ('f'),
    if code == 115 then           -- or the next one ('s')
      p.psuffix, p.weight, ends = ':' .. decimal(index - 1), (b - (now - index * b)) * (1 / b),
                                  ends + b
    end
    p.ttl = decimal(math.max(ceil((ends - now) / 1000), 1))
  end
  specs[spec] = p
  return p
end

-- Stages a write (mode, key, a, b) leaving `value` at `key`, made by commit() if its request
-- passes: 'k' SET a KEEPTTL, 'i' INCRBY a, 'n' SET a PX b, 'r' SET a PX b
-- (a reservation's record), 'z' ZADD a b and PEXPIRE `value` (a lease).
local function stage(mode, key, a, b, value)
  W[nw + 1], W[nw + 2], W[nw + 3], W[nw + 4], W[nw + 5] = mode, key, a, b, value
  nw = nw + 5
  if tent then tent[key] = value end
end

-- Makes the staged writes; the reason when one fails (those before it stay made).
local function commit()
  for j = 1, nw, 5 do
    local mode, key, a, b, done = W[j], W[j + 1], W[j + 2], W[j + 3], nil
    if mode == 'k' then
      done = redis.pcall('SET', key, a, 'KEEPTTL')
    elseif mode == 'i' then
      done = redis.pcall('INCRBY', key, a)
    elseif mode == 'z' then
      done = redis.pcall('ZADD', key, a, b)
      if not (type(done) == 'table' and done.err) then
        done = redis.pcall('PEXPIRE', key, W[j + 4])
      end
    else
      done = redis.pcall('SET', key, a, 'PX', b)
    end
    if type(done) == 'table' and done.err then  -- (a status reply is a table too)
      nw = 0
      return done.err
    end
    if mode ~= 'r' and mode ~= 'z' then cache[key] = W[j + 4] end
  end
  nw = 0
end

-- `key`'s value (false: none): tentative, as this call left it, or read now; nil and why
-- for a key of another type.
local function get(key)
  local v = tent and tent[key]
  if v == nil then
    v = cache[key]
    if v == nil then
      v = redis.pcall('GET', key)
      if type(v) == 'table' and v.err then return nil, v.err end
      cache[key] = v
    end
  end
  return v
end

-- The plain check of item i with its spec's numbers `p` (TokenBucketCheck, FixedWindowCheck,
-- SlidingWindowCheck: the same expressions): puts its record and returns whether it passes,
-- or nil and why when its state is not one. When it passes and consumes, it writes at once
-- (`now_write`: a request of this item alone) or stages its write.
-- The TTL of a bucket written from `state` (nil: none) to `empty_at`: until the end of the
-- second in which it is full again, plus one, as a PX argument; nil (KEEPTTL) when the key's
-- TTL, set by an earlier write that leaves it full within that same second, covers it.
local expiry = {}  -- a second -> its PX argument
local function bucket_ttl(state, empty_at, fill)
  local second = ceil((empty_at + fill) / 1e6)
  if state and ceil((state + fill) / 1e6) == second then return nil end
  local at = expiry[second]
  if not at then
    at = decimal((second + 1) * 1000 - math.floor(now / 1000))
    expiry[second] = at
  end
  return at
end

local function check(i, p, now_write)
  local code, key, cost, limit = p.code, KEYS[i], p.cost, p.a
  if code == 116 then
    local raw, why = get(key)
    if raw == nil then return nil, why end
    local state, record = nil, NONE
    if raw then
      if #raw == 8 then
        state, record = unpack_d('<d', raw), raw
      else
        state = tonumber(raw)  -- the decimal text of earlier versions
        if state then record = pack('<d', state) end
      end
    end
    local empty_at = now - p.fill
    if state and state > empty_at then empty_at = state end
    local next_empty_at = empty_at + p.step
    local pass = cost <= limit and next_empty_at <= now
    out[no + 1], out[no + 2], no = pass and ONE or ZERO, record, no + 2
    if pass and cost > 0 then
      local value, at = pack('<d', next_empty_at), bucket_ttl(state, next_empty_at, p.fill)
      if not now_write then
        stage(at and 'n' or 'k', key, value, at, value)
      elseif at then
        redis.call('SET', key, value, 'PX', at)
        cache[key] = value
      else
        redis.call('SET', key, value, 'KEEPTTL')
        cache[key] = value
      end
    end
    return pass
  end
  local ckey = ckeys[i] or key .. p.suffix
  local raw, why = get(ckey)
  if raw == nil then return nil, why end
  local current = tonumber(raw or 0)
  if not current then return nil, ckey .. ' holds no count' end
  local pass
  if code == 102 then
    pass = cost <= limit and current + cost <= limit
    out[no + 1], out[no + 2], no = pass and ONE or ZERO, raw or '', no + 2
  else
    local pkey = key .. p.psuffix
    local praw, pwhy = get(pkey)
    if praw == nil then return nil, pwhy end
    local previous = tonumber(praw or 0)
    if not previous then return nil, pkey .. ' holds no count' end
    pass = cost <= limit and previous * p.weight + current + cost <= limit
    out[no + 1], out[no + 2], out[no + 3], out[no + 4], no =
      pass and ONE or ZERO, raw or '', ',', praw or '', no + 4
  end
  if pass and cost > 0 then
    if not now_write then
      stage(raw and 'i' or 'n', ckey, p.count, p.ttl, current + cost)
    elseif raw then
      local done = redis.pcall('INCRBY', ckey, p.count)
      if type(done) == 'table' and done.err then return nil, done.err end
      cache[ckey] = current + cost
    else
      redis.call('SET', ckey, p.count, 'PX', p.ttl)
      cache[ckey] = cost
    end
  end
  return pass
end

-- A request of plain checks: items first..first + n - 1 with spec numbers P[i]. Returns why
-- it failed, or nil.
local P = {}
local function plain(first, n)
  tent = {}
  local pass = true
  for i = first, first + n - 1 do
    local ok, why = check(i, P[i], false)
    if ok == nil then
      tent, nw = nil, 0
      return why
    end
    pass = ok and pass
  end
  tent = nil
  if pass then return commit() end
  nw = 0
end

local SP = {}  -- item -> its spec

-- Item i alone takes ('K') or releases ('L') a lease of the set KEYS[i], as the concurrency
-- branch of general() decides, with fewer Redis calls (a set that does not exist is neither
-- pruned nor searched; a lease just taken is the latest of all).
local function lease(i, spec)
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
  local v, why = get(key)
  if v == nil then error(why) end
  return v
end

-- A charge ('C') or a settle ('S') of rate limit item i, applied at once; puts its record.
local MAX_DEBT = 4503599627370496  -- kMaxDebtMicros: 2^52 µs
local function apply(i, p, spec, op)
  local key, code, cost = KEYS[i], p.code, p.cost
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
      if cost < reserved then give_back, given_at = reserved - cost, at else add = cost - reserved end
      -- Kept as settled until its TTL, so a second settle is told, not applied.
      redis.call('SET', rkey, pack('<Bdd', 115, reserved, at), 'KEEPTTL')
    end
  end
  put(found == 0 and ONE or (found == 3 and '\6' or '\8'))
  if code == 116 then
    local raw = must(key)
    local state = raw and (#raw == 8 and unpack_d('<d', raw) or tonumber(raw)) or nil
    local full, empty_at = now - p.fill, nil
    if add > 0 then  -- TokenBucketCharge: at most 2^52 µs of debt
      empty_at = ((state and state > full) and state or full) + add * 1e6 / p.b
      if empty_at > now + MAX_DEBT then empty_at = now + MAX_DEBT end
    elseif give_back > 0 and state and state > full then  -- TokenBucketRefund
      empty_at = state - give_back * 1e6 / p.b
      if empty_at < full then empty_at = full end
    end
    if empty_at then
      local value, at = pack('<d', empty_at), bucket_ttl(state, empty_at, p.fill)
      if at then redis.call('SET', key, value, 'PX', at) else redis.call('SET', key, value, 'KEEPTTL') end
      cache[key] = value
    end
    put(empty_at and pack('<d', empty_at) or (state and pack('<d', state)) or NONE)
    return
  end
  local ckey, pkey = key .. p.suffix, code == 115 and key .. p.psuffix
  local craw = must(ckey)
  local current = craw and assert(tonumber(craw), ckey .. ' holds no count') or 0
  local praw = pkey and must(pkey)
  local previous = praw and assert(tonumber(praw), pkey .. ' holds no count') or 0
  if add > 0 then  -- FixedWindowCharge, SlidingWindowCharge
    if craw then
      redis.call('INCRBY', ckey, decimal(add))
    else
      redis.call('SET', ckey, decimal(add), 'PX', p.ttl)
    end
    current = current + add
    cache[ckey] = current
  elseif give_back > 0 then  -- the Refunds: to the window it came from, never below 0
    local at_index = window_index(given_at, p.b)
    local rkey, count = nil, 0
    if at_index == p.index then
      rkey, count = ckey, current
    elseif pkey and at_index == p.index - 1 then
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
  local limit, lease_micros, cost = p.a, p.b, p.cost
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
local function general(first, n)
  tent = {}
  local records, pass, pruned, added = {}, true, {}, {}
  for round = 1, 2 do
    for i = first, first + n - 1 do
      local spec = SP[i]
      local op = #spec > 25 and byte(spec, 26) or 0
      -- 'C' charge, 'S' settle, 'L' release, 'N' renew
      if (op == 67 or op == 83 or op == 76 or op == 78) == (round == 1) then
        local p, mark, ok, why = spec_of(spec), no, true, nil
        if p.code == 99 then
          ok = concurrency(i, p, spec, op, pruned, added)
        elseif round == 1 then
          apply(i, p, spec, op)
        else
          ok, why = check(i, p, false)
          if ok == nil then error(why) end
          if ok and op == 82 then  -- 'R': the reservation's record, if the request passes
            stage('r', KEYS[i] .. ':r:' .. string.sub(spec, 35), pack('<Bdd', 114, p.cost, now),
                  decimal((unpack_d('<d', spec, 27))))
          end
        end
        if not ok and not p.shadow then pass = false end
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


-- The entries of the layout (or of a request alone): kind, first item, item count, and for
-- a run (below) its spec. Items' specs go to SP, plain checks' numbers to P, and their reads
-- ahead into one MGET.
local kinds, firsts, counts, runs, reads, nr = {}, {}, {}, {}, {}, 0
local lead = byte(ARGV[2])  -- a spec's algorithm letter, or a layout entry's kind
local batch = lead == 80 or lead == 103 or lead == 107 or lead == 112
local function read_ahead(i, p)
  P[i] = p
  local key = KEYS[i]
  if p.code ~= 116 then
    key = key .. p.suffix
    ckeys[i] = key
  end
  nr = nr + 1
  reads[nr] = key
  if p.code == 115 then
    nr = nr + 1
    reads[nr] = KEYS[i] .. p.psuffix
  end
end
if batch then
  -- Each entry: kind, count n, then n spec numbers; or a run, 'P' m j: m requests of one
  -- plain check each, all of spec j.
  local layout, pos, i, e = ARGV[2], 1, 1, 0
  while pos <= #layout do
    local kind, n, j = byte(layout, pos, pos + 2)
    e = e + 1
    kinds[e], firsts[e], counts[e] = kind, i, n
    if kind == 80 then  -- 'P'
      local p = spec_of(ARGV[2 + j])
      runs[e] = p
      for item = i, i + n - 1 do read_ahead(item, p) end
      pos = pos + 3
    else
      for k = 1, n do
        local spec = ARGV[2 + byte(layout, pos + 1 + k)]
        SP[i + k - 1] = spec
        if kind == 112 then read_ahead(i + k - 1, spec_of(spec)) end
      end
      pos = pos + 2 + n
    end
    i = i + n
  end
else
  local kind, nk = 112, #KEYS
  for i = 1, nk do
    local spec = ARGV[1 + i]
    SP[i] = spec
    local code = byte(spec)
    if #spec ~= 25 or not (code == 116 or code == 102 or code == 115) then kind = 103 end
  end
  local op = byte(SP[1], 26)
  if nk == 1 and byte(SP[1]) == 99 and (op == 75 or op == 76) then kind = 107 end
  if kind == 112 then
    for i = 1, nk do read_ahead(i, spec_of(SP[i])) end
  end
  kinds[1], firsts[1], counts[1] = kind, 1, nk
end
if nr > 1 then
  local values = redis.call('MGET', unpack(reads, 1, nr))
  for r = 1, nr do
    if cache[reads[r]] == nil then cache[reads[r]] = values[r] end
  end
end

-- A request alone fails the call; one of a batch fails alone, with an error record.
local function fail(why)
  -- What it read or staged may not be what Redis holds now: read again after it.
  tent, nw, cache = nil, 0, {}
  local message = string.sub(type(why) == 'table' and tostring(why.err) or tostring(why), 1, 999)
  put(pack('<BH', 255, #message))
  put(message)
end
for e = 1, #kinds do
  local kind, first, n, mark = kinds[e], firsts[e], counts[e], no
  local ok, why = true, nil
  if kind == 80 then  -- a run: each its own request
    local p = runs[e]
    for i = first, first + n - 1 do
      local item_mark = no
      local pass, item_why = check(i, p, true)
      if pass == nil then
        no = item_mark
        fail(item_why)
      end
    end
  elseif kind == 112 then
    why = plain(first, n)
    ok = why == nil
  elseif not batch then
    if kind == 107 then lease(first, SP[first]) else general(first, n) end
  elseif kind == 107 then
    ok, why = pcall(lease, first, SP[first])
  else
    ok, why = pcall(general, first, n)
  end
  if not ok then
    if not batch then return redis.error_reply('tollgate: ' .. tostring(why)) end
    no = mark
    fail(why)
  end
end
return table.concat(out, '', 1, no)
