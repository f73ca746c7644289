-- tollgate: part of lua/check.lua, spliced in where it says `-- tollgate:include
-- check_distinct.inc.lua` (cmake/Redis.cmake) and so in the scope of its locals: a batch
-- whose layout starts with 'D', the caller's word that every request of it is plain checks
-- (kinds 'P' and 'p') and that no state key appears twice in it. Then no item reads what
-- another writes: each finds its state by position in the call's one MGET, and a request's
-- writes are made once all its items passed, without the cache and the tentative values of
-- the general batch below. A run's checks are decided inline, with decide()'s expressions and
-- the spec's numbers in locals; a request of several checks by decide() (redis_store_test
-- runs the algorithms' tables through both).
if byte(ARGV[2]) == 68 then
  local layout, keys = ARGV[2], KEYS
  -- Per entry: kind, first item, item count, and for a run its spec's numbers and where its
  -- first item's reads start (5 slots each in E); per item of a 'p' entry its spec's numbers
  -- (P) and where its reads start (R).
  local E, ne, R, reads, nr = {}, 0, {}, {}, 0
  local pos, i, size = 2, 1, #layout
  while pos <= size do
    local kind, n, j = byte(layout, pos, pos + 2)
    local last = i + n - 1
    if kind == 80 then  -- 'P' m j: m requests of one plain check each, all of spec j
      local spec = ARGV[2 + j]
      local p = specs[spec] or spec_of(spec)
      E[ne + 1], E[ne + 2], E[ne + 3], E[ne + 4], E[ne + 5], ne = kind, i, n, p, nr + 1, ne + 5
      local code, current, previous = p[1], p[6], p[10]
      if code == 116 then
        for item = i, last do reads[nr + item - i + 1] = keys[item] end
        nr = nr + n
      elseif code == 102 then
        for item = i, last do reads[nr + item - i + 1] = keys[item] .. current end
        nr = nr + n
      else
        for item = i, last do
          local key = keys[item]
          reads[nr + 1], reads[nr + 2], nr = key .. current, key .. previous, nr + 2
        end
      end
      pos = pos + 3
    else  -- 'p' n j1..jn: one request of n plain checks
      E[ne + 1], E[ne + 2], E[ne + 3], E[ne + 4], E[ne + 5], ne = kind, i, n, false, 0, ne + 5
      for item = i, last do
        local spec = ARGV[2 + byte(layout, pos + 2 + item - i)]
        local p = specs[spec] or spec_of(spec)
        local code = p[1]
        P[item], R[item], nr = p, nr + 1, nr + 1
        if code == 116 then
          reads[nr] = keys[item]
        else
          reads[nr] = keys[item] .. p[6]
          if code == 115 then
            nr = nr + 1
            reads[nr] = keys[item] .. p[10]
          end
        end
      end
      pos = pos + 2 + n
    end
    i = last + 1
  end
  local values = rcall('MGET', unpack(reads, 1, nr))

  local Q = {}  -- a request's writes, 4 slots each: mode, key, a, b
  for e = 1, ne, 5 do
    local first, n = E[e + 1], E[e + 2]
    if E[e] == 80 then
      -- A run, each request written at once: decide()'s expressions, inline with the spec's
      -- numbers in locals (what a check costs Redis is mostly the script's own steps).
      local p, r = E[e + 3], E[e + 4]
      if p[1] == 116 then
        local limit, cost, fill, consumed = p[2], p[4], p[6], p[7]
        local full = now - fill  -- a full bucket's empty-at time
        for _ = 1, n do
          local raw, key = values[r], reads[r]
          local state, record = nil, NONE
          if raw then
            if #raw == 8 then
              state, record = unpack_d('<d', raw), raw
            else
              state = tonumber(raw)  -- the decimal text of earlier versions
              if state then record = pack('<d', state) end
            end
          end
          local empty_at = full
          if state and state > empty_at then empty_at = state end
          local next_empty_at = empty_at + consumed
          if cost <= limit and next_empty_at <= now then
            out[no + 1], out[no + 2], no = ONE, record, no + 2
            if cost > 0 then  -- the TTL as decide() sets it
              local x, y = (next_empty_at + fill) / 1e6, state and (state + fill) / 1e6
              local second, first = x - x % 1, y and y - y % 1
              if second < x then second = second + 1 end
              if first and first < y then first = first + 1 end
              local value = pack('<d', next_empty_at)
              if first ~= second then
                local at = expiry[second]
                if not at then
                  at = decimal((second + 1) * 1000 - math.floor(now / 1000))
                  expiry[second] = at
                end
                rcall('SET', key, value, 'PX', at)
              elseif #raw == 8 then
                rcall('SETRANGE', key, '0', value)
              else
                rcall('SET', key, value, 'KEEPTTL')
              end
            end
          else
            out[no + 1], out[no + 2], no = ZERO, record, no + 2
          end
          r = r + 1
        end
      else  -- a window, fixed or sliding (two reads: the current window's counter, the previous)
        local limit, cost, by, sliding, weight = p[2], p[4], p[7], p[1] == 115, p[9]
        local step = sliding and 2 or 1
        for _ = 1, n do
          local raw, key = values[r], reads[r]
          local praw = sliding and values[r + 1]
          local current, previous, why = 0, 0, nil
          if raw then
            current = tonumber(raw)
            if not current or current % 1 ~= 0 then why = key .. ' holds no count' end
          end
          if praw and not why then
            previous = tonumber(praw)
            if not previous or previous % 1 ~= 0 then why = reads[r + 1] .. ' holds no count' end
          end
          if why then
            fail(why)
          else
            local pass
            if sliding then
              pass = cost <= limit and previous * weight + current + cost <= limit
              out[no + 1], out[no + 2], out[no + 3], out[no + 4], no =
                pass and ONE or ZERO, raw or '', ',', praw or '', no + 4
            else
              pass = cost <= limit and current + cost <= limit
              out[no + 1], out[no + 2], no = pass and ONE or ZERO, raw or '', no + 2
            end
            if pass and cost > 0 then
              if not raw then
                rcall('SET', key, by, 'PX', p[11] or counter_ttl(p))
              elseif cost == 1 then
                rcall('INCR', key)
              else
                rcall('INCRBY', key, by)
              end
            end
          end
          r = r + step
        end
      end
    else
      local mark, all, nq, why = no, true, 0, nil
      for item = first, first + n - 1 do
        local r = R[item]
        local key = reads[r]
        local pass, mode, a, b = decide(P[item], key, values[r], values[r + 1], false)
        if pass == nil then
          why = mode
          break
        end
        if not pass then
          all = false
        elseif mode then
          Q[nq + 1], Q[nq + 2], Q[nq + 3], Q[nq + 4], nq = mode, key, a, b, nq + 4
        end
      end
      if why then
        no = mark
        fail(why)
      elseif all then
        for w = 1, nq, 4 do write(Q[w], Q[w + 1], Q[w + 2], Q[w + 3]) end
      end
    end
  end
  return table.concat(out, '', 1, no)
end
