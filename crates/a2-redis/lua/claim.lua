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

local claimed = {}
local earliest = nil
local function wait_for(t)
  if not earliest or t < earliest then earliest = t end
end
for _, member in ipairs(redis.call('ZRANGE', K_READY, 0, -1)) do
  local i = tonumber(member)
  if not excluded[i] then
    local lease = tonumber(rget(i, 'x') or '')
    local retry = tonumber(rget(i, 'r') or '')
    if lease and lease > NOW then
      wait_for(lease)
    elseif retry and retry > NOW then
      wait_for(retry)
    else
      claimed[#claimed + 1] = i
      if #claimed == limit then break end
    end
  end
end

if #claimed == 0 then
  if earliest then return { 'busy', string.format('%d', earliest) } end
  return { 'settled' }
end
local reply = { 'claimed' }
for _, i in ipairs(claimed) do
  redis.call('HINCRBY', K_REC, rf(i, 'a'), 1)
  redis.call('HSETNX', K_REC, rf(i, 'fc'), ARGV[2])
  redis.call('HSET', K_REC, rf(i, 'lc'), ARGV[2], rf(i, 'h'), holder, rf(i, 'x'), expires)
  redis.call('HDEL', K_REC, rf(i, 'r'))
  reply[#reply + 1] = row(i)
end
redis.call('HINCRBY', K_SUM, 'attempt_count', #claimed)
touch()
return reply
