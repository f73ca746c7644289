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
-- and a layout that starts with 'D' promises that every entry is of plain checks ('P', 'p')
-- and that no state key appears twice in the call (check_distinct.inc.lua decides it).
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
local rcall = redis.call
local NOW, ZERO, ONE = pack('<d', now), '\0', '\1'
local NONE = '\0\0\0\0\0\0\240\255'  -- pack('<d', -math.huge): no bucket state

-- One plain check alone, the most common call while few callers wait, decided inline: the
-- decisions of check() (check_batch.inc.lua) without its tables and closures; the loop after
-- this makes them for a request of several. All must decide alike: redis_store_test runs the
-- algorithms' tables through each.
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
    if cost > 0 then  -- the TTL: as bucket_ttl() below
      local second, value = ceil((next_empty_at + fill) / 1e6), pack('<d', next_empty_at)
      if not (state and ceil((state + fill) / 1e6) == second) then
        redis.call('SET', key, value, 'PX',
                   format('%d', (second + 1) * 1000 - math.floor(now / 1000)))
      elseif #raw == 8 then
        redis.call('SETRANGE', key, '0', value)
      else
        redis.call('SET', key, value, 'KEEPTTL')
      end
    end
    return NOW .. ONE .. record
  elseif code == 102 or code == 115 then
    local index = math.floor(now / b)  -- floor(now / b) exactly, as in spec_of()
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
    if not (current and current % 1 == 0 and previous and previous % 1 == 0) then
      return redis.error_reply('tollgate: ' .. ckey .. ' holds no count')
    end
    local estimate, ends = current, (index + 1) * b  -- a counter matters until its window
    if code == 115 then                               -- ends, or the next one
      estimate, ends = previous * ((b - (now - index * b)) * (1 / b)) + current, ends + b
    end
    local pass = cost <= a and estimate + cost <= a
    if pass and cost > 0 then
      if craw then
        if cost == 1 then
          redis.call('INCR', ckey)
        else
          redis.call('INCRBY', ckey, format('%d', cost))
        end
      else
        redis.call('SET', ckey, format('%d', cost), 'PX',
                   format('%d', math.max(ceil((ends - now) / 1000), 1)))
      end
    end
    if code == 102 then return NOW .. (pass and ONE or ZERO) .. (craw or '') end
    return NOW .. (pass and ONE or ZERO) .. (craw or '') .. ',' .. (praw or '')
  end
end

-- One request alone of several plain checks on distinct keys, decided inline as above. Its
-- writes (W: mode, key, value, PX argument) are made once every item passed.
local nk, lone = #KEYS, #ARGV == #KEYS + 1 and #KEYS <= 16
for i = 1, lone and nk or 0 do
  local spec, code = ARGV[1 + i], byte(ARGV[1 + i])
  if #spec ~= 25 or not (code == 116 or code == 102 or code == 115) then lone = false end
  for j = 1, i - 1 do
    if KEYS[j] == KEYS[i] then lone = false end
  end
end
if lone then
  local pieces, W, nw, all = { NOW }, {}, 0, true
  for i = 1, nk do
    local code, a, b, cost = unpack_d('<Bddd', ARGV[1 + i])
    local key, pass = KEYS[i], false
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
      pass = cost <= a and next_empty_at <= now
      pieces[#pieces + 1], pieces[#pieces + 2] = pass and ONE or ZERO, record
      if pass and cost > 0 then  -- the TTL: as bucket_ttl() below
        local second, mode, ttl = ceil((next_empty_at + fill) / 1e6), 'o', nil
        if not (state and ceil((state + fill) / 1e6) == second) then
          mode, ttl = 'n', format('%d', (second + 1) * 1000 - math.floor(now / 1000))
        elseif #raw ~= 8 then
          mode = 'k'
        end
        W[nw + 1], W[nw + 2], W[nw + 3], W[nw + 4], nw = mode, key, pack('<d', next_empty_at), ttl,
                                                           nw + 4
      end
    else
      local index = math.floor(now / b)  -- floor(now / b) exactly, as in spec_of()
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
      if not (current and current % 1 == 0 and previous and previous % 1 == 0) then
        return redis.error_reply('tollgate: ' .. ckey .. ' holds no count')
      end
      local estimate, ends = current, (index + 1) * b  -- a counter matters until its window
      if code == 115 then                               -- ends, or the next one
        estimate, ends = previous * ((b - (now - index * b)) * (1 / b)) + current, ends + b
      end
      pass = cost <= a and estimate + cost <= a
      pieces[#pieces + 1], pieces[#pieces + 2] = pass and ONE or ZERO, craw or ''
      if code == 115 then pieces[#pieces + 1], pieces[#pieces + 2] = ',', praw or '' end
      if pass and cost > 0 then
        local mode, ttl = 'i', nil
        if not craw then mode, ttl = 'n', format('%d', math.max(ceil((ends - now) / 1000), 1)) end
        W[nw + 1], W[nw + 2], W[nw + 3], W[nw + 4], nw = mode, ckey, format('%d', cost), ttl,
                                                           nw + 4
      end
    end
    all = all and pass
  end
  for j = 1, all and nw or 0, 4 do
    local mode, key, value = W[j], W[j + 1], W[j + 2]
    if mode == 'o' then  -- the 8 bytes of a bucket whose TTL stays
      redis.call('SETRANGE', key, '0', value)
    elseif mode == 'k' then
      redis.call('SET', key, value, 'KEEPTTL')
    elseif mode == 'i' then
      if value == '1' then redis.call('INCR', key) else redis.call('INCRBY', key, value) end
    else
      redis.call('SET', key, value, 'PX', W[j + 3])
    end
  end
  return table.concat(pieces)
end

-- tollgate:include check_batch.inc.lua
-- tollgate:include check_distinct.inc.lua

local SP = {}  -- item -> its spec

-- lease(i, spec) and general(first, n), defined by load_general() when a call needs them.
local lease, general
-- tollgate:include check_general.inc.lua

-- The entries of the layout (or of a request alone): kind, first item, item count, and for
-- a run its spec's numbers. Items' specs go to SP, plain checks' numbers to P, and the keys
-- those read to `reads`, for one MGET.
local kinds, firsts, counts, runs, reads, nr = {}, {}, {}, {}, {}, 0
local lead = byte(ARGV[2])  -- a spec's algorithm letter, or a layout entry's kind
local batch = lead == 80 or lead == 103 or lead == 107 or lead == 112
local function read_ahead(i, p)
  local key = KEYS[i]
  if p[1] ~= 116 then
    key = key .. p[6]
    ckeys[i] = key
    if p[1] == 115 then
      nr = nr + 1
      reads[nr] = KEYS[i] .. p[10]
      pkeys[i] = reads[nr]
    end
  end
  nr = nr + 1
  reads[nr] = key
end
if batch then
  local layout, pos, i, e = ARGV[2], 1, 1, 0
  while pos <= #layout do
    local kind, n, j = byte(layout, pos, pos + 2)
    e = e + 1
    kinds[e], firsts[e], counts[e] = kind, i, n
    if kind == 80 then  -- 'P' m j: a run of m requests of one plain check each, of spec j
      local spec = ARGV[2 + j]
      local p = specs[spec] or spec_of(spec)
      runs[e] = p
      if p[1] == 116 then
        for item = i, i + n - 1 do reads[nr + item - i + 1] = KEYS[item] end
        nr = nr + n
      else
        for item = i, i + n - 1 do read_ahead(item, p) end
      end
      pos = pos + 3
    else  -- kind n j1..jn
      for item = i, i + n - 1 do
        local spec = ARGV[2 + byte(layout, pos + 2 + item - i)]
        SP[item] = spec
        if kind == 112 then
          local p = specs[spec] or spec_of(spec)
          P[item] = p
          read_ahead(item, p)
        end
      end
      pos = pos + 2 + n
    end
    i = i + n
  end
else
  local kind = 112
  for i = 1, nk do
    local spec = ARGV[1 + i]
    SP[i] = spec
    local code = byte(spec)
    if #spec ~= 25 or not (code == 116 or code == 102 or code == 115) then kind = 103 end
  end
  local op = byte(SP[1], 26)
  if nk == 1 and byte(SP[1]) == 99 and (op == 75 or op == 76) then kind = 107 end
  if kind == 112 then
    for i = 1, nk do
      P[i] = spec_of(SP[i])
      read_ahead(i, P[i])
    end
  end
  kinds[1], firsts[1], counts[1] = kind, 1, nk
end
if nr > 1 then
  local values = redis.call('MGET', unpack(reads, 1, nr))
  for r = 1, nr do
    if cache[reads[r]] == nil then cache[reads[r]] = values[r] end
  end
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
  else
    if not general then load_general() end
    if not batch then
      if kind == 107 then lease(first, SP[first]) else general(first, n) end
    elseif kind == 107 then
      ok, why = pcall(lease, first, SP[first])
    else
      ok, why = pcall(general, first, n)
    end
  end
  if not ok then
    if not batch then return redis.error_reply('tollgate: ' .. tostring(why)) end
    no = mark
    fail(why)
  end
end
return table.concat(out, '', 1, no)
