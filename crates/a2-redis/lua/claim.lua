-- claim: leases the ready events of a session to a holder (C1-C6).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: holder
-- ARGV[5]: lease expiry (store clock, ms)
-- ARGV[6]: limit, at least 1
-- ARGV[7]: m, the number of excluded indexes, then ARGV[8..7+m]: them
-- Returns: {'settled'} (C1, C4); {'busy', retry_at} (C3);
--          {'claimed', row...} in index order (C2).
if not has_pending() then return { 'settled' } end
local holder, expires, limit = ARGV[4], ARGV[5], tonumber(ARGV[6])
local excluded = {}
for k = 1, tonumber(ARGV[7]) do excluded[tonumber(ARGV[7 + k])] = true end

-- Leases and retry times that have come due: their events are ready.
local due = redis.call('ZRANGEBYSCORE', K_TIMED, '-inf', ARGV[2])
for _, member in ipairs(due) do
  redis.call('ZREM', K_TIMED, member)
  redis.call('ZADD', K_READY, member, member)
end

-- Take the lowest ready indexes, a chunk at a time, skipping excluded
-- ones and (only after the clock moved back) ones not yet due.
local claimed, not_yet = {}, {}
local offset = 0
while #claimed < limit do
  local chunk = redis.call('ZRANGE', K_READY, offset, offset + 99)
  if #chunk == 0 then break end
  offset = offset + #chunk
  for _, member in ipairs(chunk) do
    local i = tonumber(member)
    if not excluded[i] then
      local lease = tonumber(rget(i, 'x') or '')
      local retry = tonumber(rget(i, 'r') or '')
      if (rget(i, 'h') and lease and lease > NOW) or (retry and retry > NOW) then
        not_yet[#not_yet + 1] = i
      else
        claimed[#claimed + 1] = i
        if #claimed == limit then break end
      end
    end
  end
end
for _, i in ipairs(not_yet) do reslot(i) end

if #claimed == 0 then
  -- C3: the earliest time among ready events not excluded.
  local offset = 0
  while true do
    local chunk = redis.call('ZRANGE', K_TIMED, offset, offset + 99, 'WITHSCORES')
    if #chunk == 0 then return { 'settled' } end
    offset = offset + #chunk / 2
    for k = 1, #chunk, 2 do
      local i = tonumber(chunk[k])
      if not excluded[i] then
        -- The exact time from the record (a score is a double).
        local at = rget(i, 'r')
        if rget(i, 'h') and rget(i, 'x') then at = rget(i, 'x') end
        return { 'busy', at or chunk[k + 1] }
      end
    end
  end
end
local reply = { 'claimed' }
for _, i in ipairs(claimed) do
  redis.call('HINCRBY', K_REC, rf(i, 'a'), 1)
  redis.call('HSETNX', K_REC, rf(i, 'fc'), ARGV[2])
  redis.call('HSET', K_REC, rf(i, 'lc'), ARGV[2], rf(i, 'h'), holder, rf(i, 'x'), expires)
  redis.call('HDEL', K_REC, rf(i, 'r'))
  redis.call('ZREM', K_READY, i)
  redis.call('ZADD', K_TIMED, expires, i)
  reply[#reply + 1] = row(i)
end
redis.call('HINCRBY', K_SUM, 'attempt_count', #claimed)
touch()
return reply
