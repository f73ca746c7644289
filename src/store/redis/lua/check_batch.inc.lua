-- tollgate: part of lua/check.lua, spliced in where it says `-- tollgate:include
-- check_batch.inc.lua` (cmake/Redis.cmake) and so in the scope of its locals: what decides
-- the plain checks of a batch, and of a request alone that the inline paths above it do not
-- take. check(i, p, now_write) decides one item; plain(first, n) a request of several, all or
-- nothing.

local out, no = { NOW }, 1  -- the reply's pieces, and how many
local cache = {}  -- key -> its value as this call left it: a string, a count, or false (none)
local tent  -- while a request decides items that share a key: key -> its tentative value
local ckeys, pkeys = {}, {}  -- item -> its window's counter key, the previous window's
local W, nw = {}, 0  -- staged writes, 5 slots each (stage)
local function decimal(x) return format('%d', x) end
local function put(piece)
  no = no + 1
  out[no] = piece
end

-- A spec's numbers, and what this call's time makes of them, once per distinct spec: an
-- array (a table of named fields costs Redis twice as much to build) of
--   [1] the algorithm's letter, lower case   [2] a   [3] b   [4] cost   [5] shadow
--   't'  [6] fill time (capacity * 1e6 / rate)   [7] cost * 1e6 / rate
--   'f', 's'  [6] ':<window index>'   [7] cost in decimal   [8] the window index
--   's'  [9] the previous window's weight   [10] ':<window index - 1>'
-- and [11], a new counter's PX argument, made when first needed (counter_ttl).
local specs = {}
local function spec_of(spec)
  local p = specs[spec]
  if p then return p end
  local code, a, b, cost = unpack_d('<Bddd', spec)
  local shadow = code < 97
  if shadow then code = code + 32 end
  if code == 116 then
    p = { code, a, b, cost, shadow, a * 1e6 / b, cost * 1e6 / b }
  elseif code == 102 or code == 115 then
    -- floor(now / b) computed exactly: the double quotient may round across an integer.
    local index = math.floor(now / b)
    local r = now - index * b
    if r < 0 then index = index - 1 elseif r >= b then index = index + 1 end
    p = { code, a, b, cost, shadow, ':' .. decimal(index), cost == 1 and '1' or decimal(cost),
          index }
    if code == 115 then
      p[9], p[10] = (b - (now - index * b)) * (1 / b), ':' .. decimal(index - 1)
    end
  else
    p = { code, a, b, cost, shadow }
  end
  specs[spec] = p
  return p
end

-- A new counter's PX argument: until its window ends ('f'), or the next one ('s').
local function counter_ttl(p)
  local ends = (p[8] + (p[1] == 115 and 2 or 1)) * p[3]
  p[11] = decimal(math.max(ceil((ends - now) / 1000), 1))
  return p[11]
end

-- Stages a write (mode, key, a, b) leaving `value` at `key`, made by commit() if its request
-- passes: 'o' SETRANGE 0 a (a bucket's 8 bytes overwritten, its TTL kept), 'k' SET a KEEPTTL,
-- 'i' INCRBY a (INCR for 1), 'n' SET a PX b, 'r' SET a PX b (a reservation's record), 'z'
-- ZADD a b and PEXPIRE `value` (a lease).
local function stage(mode, key, a, b, value)
  W[nw + 1], W[nw + 2], W[nw + 3], W[nw + 4], W[nw + 5] = mode, key, a, b, value
  nw = nw + 5
  if tent then tent[key] = value end
end

local function write(mode, key, a, b)
  if mode == 'o' then
    rcall('SETRANGE', key, '0', a)
  elseif mode == 'k' then
    rcall('SET', key, a, 'KEEPTTL')
  elseif mode == 'i' then
    if a == '1' then
      rcall('INCR', key)
    else
      rcall('INCRBY', key, a)
    end
  elseif mode == 'z' then
    rcall('ZADD', key, a, b)
  else
    rcall('SET', key, a, 'PX', b)
  end
end

-- Makes the staged writes.
local function commit()
  for j = 1, nw, 5 do
    local mode, key, value = W[j], W[j + 1], W[j + 4]
    write(mode, key, W[j + 2], W[j + 3])
    if mode == 'z' then
      redis.call('PEXPIRE', key, value)
    elseif mode ~= 'r' then
      cache[key] = value
    end
  end
  nw = 0
end

-- `key`'s value read now (false: none), or nil and why for a key of another type.
local function fetch(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return nil, v.err end
  cache[key] = v
  return v
end

-- The TTL of a bucket written from `state` (nil: none) to `empty_at`: until the end of the
-- second in which it is full again, plus one, as a PX argument; nil when the key's TTL, set by
-- an earlier write that leaves it full within that same second, covers it.
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

-- The plain check with spec numbers `p` of state `raw` (a sliding window's previous count
-- `praw`) at `key` (a bucket's key, or a window's counter), with the expressions of
-- TokenBucketCheck, FixedWindowCheck and SlidingWindowCheck: puts its record and returns
-- whether it passes and, when it passes and consumes, the write its request makes (mode, a, b
-- as write() takes them, and the value it leaves), made here already when `now_write` (a
-- request of this check alone); or nil and why when the state is not one.
local function decide(p, key, raw, praw, now_write)
  local code, cost, limit = p[1], p[4], p[2]
  if code == 116 then
    local state, record = nil, NONE
    if raw then
      if #raw == 8 then
        state, record = unpack_d('<d', raw), raw
      else
        state = tonumber(raw)  -- the decimal text of earlier versions
        if state then record = pack('<d', state) end
      end
    end
    local fill = p[6]
    local empty_at = now - fill
    if state and state > empty_at then empty_at = state end
    local next_empty_at = empty_at + p[7]
    if not (cost <= limit and next_empty_at <= now) then
      out[no + 1], out[no + 2], no = ZERO, record, no + 2
      return false
    end
    out[no + 1], out[no + 2], no = ONE, record, no + 2
    if cost <= 0 then return true end
    -- bucket_ttl(), inline: ceil() by arithmetic, cheaper than a call of math.ceil
    local x, y = (next_empty_at + fill) / 1e6, state and (state + fill) / 1e6
    local second, first = x - x % 1, y and y - y % 1
    if second < x then second = second + 1 end
    if first and first < y then first = first + 1 end
    local value = pack('<d', next_empty_at)
    if first == second then  -- the TTL set before covers it
      if #raw ~= 8 then
        if now_write then rcall('SET', key, value, 'KEEPTTL') end
        return true, 'k', value, nil, value
      end
      if now_write then rcall('SETRANGE', key, '0', value) end
      return true, 'o', value, nil, value
    end
    local at = expiry[second]
    if not at then
      at = decimal((second + 1) * 1000 - math.floor(now / 1000))
      expiry[second] = at
    end
    if now_write then rcall('SET', key, value, 'PX', at) end
    return true, 'n', value, at, value
  end
  local current = 0  -- count_of(raw), inline
  if raw then
    current = tonumber(raw)
    if not current or current % 1 ~= 0 then return nil, key .. ' holds no count' end
  end
  local pass
  if code == 102 then
    pass = cost <= limit and current + cost <= limit
    out[no + 1], out[no + 2], no = pass and ONE or ZERO, raw or '', no + 2
  else
    local previous = 0
    if praw then
      previous = tonumber(praw)
      if not previous or previous % 1 ~= 0 then
        return nil, string.sub(key, 1, #key - #p[6]) .. p[10] .. ' holds no count'
      end
    end
    pass = cost <= limit and previous * p[9] + current + cost <= limit
    out[no + 1], out[no + 2], out[no + 3], out[no + 4], no =
      pass and ONE or ZERO, raw or '', ',', praw or '', no + 4
  end
  if not pass or cost <= 0 then return pass end
  if raw then
    if now_write then
      if cost == 1 then rcall('INCR', key) else rcall('INCRBY', key, p[7]) end
    end
    return true, 'i', p[7], nil, current + cost
  end
  local ttl = p[11] or counter_ttl(p)
  if now_write then rcall('SET', key, p[7], 'PX', ttl) end
  return true, 'n', p[7], ttl, current + cost
end

-- `key`'s value as this call left it: a request's tentative one, the cache's, or read now.
local function value_of(key)
  local v = tent and tent[key]
  if v == nil then
    v = cache[key]
    if v == nil then return fetch(key) end
  end
  return v
end

-- The plain check of item i with its spec's numbers `p` (decide()) on what this call left
-- under its keys: puts its record and returns whether it passes, or nil and why. When it
-- passes and consumes, it writes at once (`now_write`: a request of this item alone) or
-- stages its write.
local function check(i, p, now_write)
  local key, praw = KEYS[i], nil
  if p[1] ~= 116 then key = ckeys[i] or key .. p[6] end
  local raw, why = value_of(key)
  if raw == nil then return nil, why end
  if p[1] == 115 then
    praw, why = value_of(pkeys[i] or KEYS[i] .. p[10])
    if praw == nil then return nil, why end
  end
  local pass, mode, a, b, value = decide(p, key, raw, praw, now_write)
  if pass and mode then
    if now_write then
      cache[key] = value
    else
      stage(mode, key, a, b, value)
    end
  end
  return pass, mode
end

-- A request of plain checks: items first..first + n - 1 with spec numbers P[i]. Returns why
-- it failed, or nil. Its writes wait until every item passed; an item sees the tentative
-- values of earlier ones when they share a key.
local P = {}
local function plain(first, n)
  local last = first + n - 1
  for i = first + 1, last do
    for j = first, i - 1 do
      if KEYS[i] == KEYS[j] then tent = {} end
    end
  end
  local pass = true
  for i = first, last do
    local ok, why = check(i, P[i], false)
    if ok == nil then
      tent, nw = nil, 0
      return why
    end
    pass = ok and pass
  end
  tent = nil
  if pass then commit() end
  nw = 0
end

-- A request alone fails the call; one of a batch fails alone, with an error record.
local function fail(why)
  -- What it read or staged may not be what Redis holds now: read again after it.
  tent, nw, cache = nil, 0, {}
  local message = string.sub(type(why) == 'table' and tostring(why.err) or tostring(why), 1, 999)
  put(pack('<BH', 255, #message))
  put(message)
end
