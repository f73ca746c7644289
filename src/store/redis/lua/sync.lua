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
--           and n items of 6 fields: delta, counter TTL in ms, limit, sliding window µs,
--           window index, demand. `demand` (units asked of this instance since its last
--           sync of the key, admitted or refused) is reported for demand-weighted grants
--           (issue 26) and not read yet. src/store/sync/round.cc writes these arguments.
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
-- share(limit - used - held, 1, N), the rule of src/algorithm/share.h (SyncGrant), where
-- held is the others' grants plus share(limit, 1, N) for every other live instance with none
-- (it may be spending its first share of the window). So counted + granted never exceeds
-- the limit. For a sliding window (window µs > 0) the item just before is the previous
-- window's counter, and `used` is previous * weight + current at the time above. That sum
-- does not jump at a window boundary, so a grant stays valid across it: an instance that
-- has not synced the new window yet keeps spending what is left of its last grant of the
-- previous window, and the others hold exactly that (its field in <previous counter>:grants)
-- instead of a first share.
--
-- Returns { the time above (µs), then per item of the last batch: total, grant (-1: none) }.

-- src/algorithm/share.h, Share(): floor(max(0, left) * self / total), in this order.
local function share(left, self, total)
  local s = math.floor(left * self / total + 1e-9)
  if s < 0 then return 0 end
  return s
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
      local grant = -1
      if limit > 0 then
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
        local silent = instances - 1 - seen
        if silent > 0 then held = held + silent * share(limit, 1, instances) end
        grant = share(limit - used - held, 1, instances)
        redis.call('HSET', grants, id, grant)
        redis.call('PEXPIRE', grants, ttl, 'NX')
      end
      out[#out + 1] = total
      out[#out + 1] = grant
    end
    before = total
    arg = arg + 6
    key = key + 1
  end
end
if newest > applied then
  redis.call('SET', KEYS[1], string.format('%d', newest), 'PX', ARGV[1])
end
return out
