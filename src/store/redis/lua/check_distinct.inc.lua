-- tollgate: part of lua/check.lua, spliced in where it says `-- tollgate:include
-- check_distinct.inc.lua` (cmake/Redis.cmake) and so in the scope of its locals: a batch
-- whose layout starts with 'D', the caller's word that every request of it is plain checks
-- (kinds 'P' and 'p') and that no state key appears twice in it. Then no item reads what
-- another writes: each finds its state by position in the call's one MGET, decide() decides
-- it, and a request's writes are made once all its items passed, without the cache and the
-- tentative values of the general batch below (whose decisions are the same).
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
      E[ne + 1], E[ne + 2], E[ne + 3], ne = kind, i, n, ne + 5
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
    if E[e] == 80 then  -- each its own request, written at once
      local p, r = E[e + 3], E[e + 4]
      local step = p[1] == 115 and 2 or 1
      for _ = first, first + n - 1 do
        local pass, why = decide(p, reads[r], values[r], values[r + 1], true)
        if pass == nil then fail(why) end
        r = r + step
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
