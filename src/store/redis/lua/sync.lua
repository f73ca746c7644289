-- tollgate: one sync round of one instance for one hash slot (docs/sync.md), atomic in Redis.
--
-- KEYS[1]   <prefix>sync:<instance id>: the sequence number of the last batch applied; on a
--           Redis Cluster <prefix>sync:<instance id>:{<tag>}, one per slot, in the call's slot
--           (every key a call touches, <counter>:grants included, is in that one slot).
-- KEYS[2..] window counters <prefix><limit name>:{<key>}:<window index>, batch after batch.
-- ARGV[1]   TTL of KEYS[1] in ms.      ARGV[2]  this instance's id.
-- ARGV[3]   N, the number of live instances.
-- ARGV[4]   the time in µs that weighs sliding windows: 0 means Redis TIME (production); a
--           store on a simulated clock sends its own.
-- ARGV[5]   the number of batches B; then per batch: its sequence number, its key count n,
--           and n items of 8 fields: delta, counter TTL in ms, limit, sliding window µs,
--           window index, demand (units asked of this instance since its last sync of the
--           key, admitted or refused), shares (0: equal, 1: demand), sync interval µs.
--           src/store/sync/round.cc writes these arguments.
--
-- Batches are the unacknowledged earlier rounds (whose reply was lost: Redis may or may not
-- have applied them) followed by this round's. A batch whose sequence number is not above
-- the recorded one was applied already and is skipped, so a lost reply never counts twice.
-- A key with delta > 0 gets INCRBY and PEXPIRE ... NX (the first write of a window sets its
-- TTL, as check.lua does); delta 0 only reads.
--
-- Grants (items of the last batch with limit > 0): <counter>:grants is a hash from instance
-- id to the units that instance may still admit without syncing, written with the counter's
-- TTL. This instance's old grant is released (its delta is now counted), then it gets
-- share(limit - used - held, weights), the rule of src/algorithm/share.h (SyncGrant), where
-- held is the others' grants plus, for every other live instance with none, what it may be
-- spending before its first sync of the window: its first share (below) or the floor,
-- FirstShare(limit, N, shares). So counted + granted never exceeds the limit. For a sliding
-- window (window µs > 0) the item just before is the previous window's counter, and `used`
-- is previous * weight + current at the time above. That sum does not jump at a window
-- boundary, so a grant stays valid across it: an instance that has not synced the new window
-- yet keeps spending what is left of its last grant of the previous window, and the others
-- hold exactly that (its field in <previous counter>:grants) instead of a first share.
--
-- Shares: equal: weights {1, N}, floor share(limit, 1, N). Demand: <prefix><limit
-- name>:{<key>}:demand (the counter's key less its index) is a hash from instance id to
-- "demand time window first_share": its last reported demand, the time above when it was
-- reported, and (fixed windows) the first share set aside for it in window `window`.
-- Weights are DemandWeights over the reports not older than 3 sync intervals
-- (kDemandHorizonIntervals); the floor is share(limit, 1, 10N). A fixed window's sync also
-- sets this instance's first share of the next window, NextFirstShare: its weighted part of
-- the limit, at most what the others' first shares of that window and the floors of the
-- others without one leave. Reports older than the horizon whose first share is of a window
-- before this one are removed; the hash gets the counter's TTL at every sync.
--
-- Returns { the time above (µs), then per item of the last batch: total, grant (-1: none),
-- first share of the next window (-1: none) }.

-- src/algorithm/share.h, kDemandFloorDivisor and kDemandHorizonIntervals.
local FLOOR_DIVISOR = 10
local HORIZON_INTERVALS = 3

local function share(left, self, total)
  local s = math.floor(left * self / total + 1e-9)
  if s < 0 then return 0 end
  return s
end

-- src/algorithm/share.h, FirstShare(): the floor share of an instance without a grant.
local function first_share(left, instances, demand)
  if demand and instances > 1 then return share(left, 1, FLOOR_DIVISOR * instances) end
  return share(left, 1, instances)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local given = tonumber(ARGV[4])
if given > 0 then now = given end
local out = { now }
local id = ARGV[2]
local instances = tonumber(ARGV[3])
local applied = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local batches = tonumber(ARGV[5])
local arg, key = 6, 2
local newest = applied
for b = 1, batches do
  local seq = tonumber(ARGV[arg])
  local n = tonumber(ARGV[arg + 1])
  arg = arg + 2
  local fresh = seq > applied
  if seq > newest then newest = seq end
  local before = 0
  for i = 1, n do
    local delta = tonumber(ARGV[arg])
    local ttl = math.max(tonumber(ARGV[arg + 1]), 1)
    local limit = tonumber(ARGV[arg + 2])
    local window = tonumber(ARGV[arg + 3])
    local index = tonumber(ARGV[arg + 4])
    local total
    if fresh and delta > 0 then
      total = redis.call('INCRBY', KEYS[key], delta)
      redis.call('PEXPIRE', KEYS[key], ttl, 'NX')
    else
      total = tonumber(redis.call('GET', KEYS[key]) or '0') or 0
    end
    if b == batches then
      local grant, next_share = -1, -1
      if limit > 0 then
        local demand = tonumber(ARGV[arg + 5])
        local by_demand = ARGV[arg + 6] == '1'
        local used = total
        if window > 0 then
          -- src/algorithm/sliding_window.h, SlidingWindowEstimate(), in this order.
          local elapsed = now - index * window
          if elapsed < 0 then elapsed = 0 elseif elapsed > window then elapsed = window end
          used = before * ((window - elapsed) * (1 / window)) + total
        end
        local grants = KEYS[key] .. ':grants'
        redis.call('HDEL', grants, id)
        local held, seen = 0, 0
        local others = redis.call('HGETALL', grants)
        local synced = {}
        for j = 1, #others, 2 do
          synced[others[j]] = true
          held = held + tonumber(others[j + 1])
          seen = seen + 1
        end
        if window > 0 then
          local carried = redis.call('HGETALL', KEYS[key - 1] .. ':grants')
          for j = 1, #carried, 2 do
            if carried[j] ~= id and not synced[carried[j]] then
              held = held + tonumber(carried[j + 1])
              seen = seen + 1
            end
          end
        end
        local self_weight, total_weight = 1, instances
        local base = string.sub(KEYS[key], 1, #KEYS[key] - #ARGV[arg + 4])
        local reports, next_held, next_holders, own_next = base .. 'demand', 0, 0, -1
        if by_demand then
          -- src/algorithm/share.h, DemandWeights(), over the fresh reports.
          local oldest = now - HORIZON_INTERVALS * tonumber(ARGV[arg + 7])
          local fresh, fleet = {}, demand
          local all = redis.call('HGETALL', reports)
          for j = 1, #all, 2 do
            local d, at, w, s = string.match(all[j + 1], '^(%d+) (%d+) (%d+) (%d+)$')
            d, at, w, s = tonumber(d), tonumber(at), tonumber(w), tonumber(s)
            if d and all[j] == id then
              if w == index + 1 then own_next = s end
            elseif d then
              if at >= oldest then
                fresh[#fresh + 1] = d
                fleet = fleet + d
              elseif w < index then
                redis.call('HDEL', reports, all[j])
              end
              if w == index and not synced[all[j]] then
                -- Set aside for this window, not synced in it yet: it may be spending it.
                held = held + s
                seen = seen + 1
              elseif w == index + 1 then
                next_held = next_held + s
                next_holders = next_holders + 1
              end
            end
          end
          if fleet > 0 then
            local scale = FLOOR_DIVISOR * instances
            self_weight = math.max(scale * demand, fleet)
            total_weight = self_weight
            for j = 1, #fresh do total_weight = total_weight + math.max(scale * fresh[j], fleet) end
            local unreported = instances - 1 - #fresh
            if unreported > 0 then total_weight = total_weight + unreported * fleet end
          end
        end
        local silent = instances - 1 - seen
        if silent > 0 then held = held + silent * first_share(limit, instances, by_demand) end
        grant = share(limit - used - held, self_weight, total_weight)
        redis.call('HSET', grants, id, grant)
        redis.call('PEXPIRE', grants, ttl, 'NX')
        if by_demand then
          local next_window = 0
          if window == 0 then
            -- src/algorithm/share.h, NextFirstShare().
            next_window = index + 1
            local unreported = instances - 1 - next_holders
            if unreported < 0 then unreported = 0 end
            local floor = first_share(limit, instances, true)
            local available = limit - next_held - unreported * floor
            next_share = share(limit, self_weight, total_weight)
            if available < next_share then next_share = available end
            -- Once another instance has synced the next window, its grant holds what was set
            -- aside for this one then: never more now.
            if redis.call('EXISTS', base .. string.format('%d', index + 1) .. ':grants') == 1 then
              if own_next < 0 then own_next = floor end
              if own_next < next_share then next_share = own_next end
            end
            if next_share < 0 then next_share = 0 end
          end
          redis.call('HSET', reports, id, string.format('%d %d %d %d', demand, now, next_window,
                                                        math.max(next_share, 0)))
          redis.call('PEXPIRE', reports, ttl)
        end
      end
      out[#out + 1] = total
      out[#out + 1] = grant
      out[#out + 1] = next_share
    end
    before = total
    arg = arg + 8
    key = key + 1
  end
end
if newest > applied then
  redis.call('SET', KEYS[1], string.format('%d', newest), 'PX', ARGV[1])
end
return out
