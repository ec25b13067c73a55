-- claim: leases the ready events of a session to a holder (C1-C6).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: holder
-- ARGV[5]: lease expiry (store clock, ms)
-- ARGV[6]: limit, at least 1
-- ARGV[7]: m, the number of excluded indexes, then ARGV[8..7+m]: them
-- Returns: {'settled'} (C1, C4); {'busy', retry_at} (C3);
--          {'claimed', row...} in index order (C2).
local sum = summary()
if sum.pending_count == 0 then return { 'settled' } end
local holder, expires, limit = ARGV[4], ARGV[5], tonumber(ARGV[6])
local m = tonumber(ARGV[7])
local excluded = {}
for k = 1, m do excluded[tonumber(ARGV[7 + k])] = true end

-- Leases and retry times that have come due: their events are ready.
local due = redis.call('ZRANGEBYSCORE', K_TIMED, '-inf', ARGV[2])
if #due > 0 then
  local moved = {}
  for _, member in ipairs(due) do
    moved[#moved + 1] = member
    moved[#moved + 1] = member
  end
  bulk('ZREM', K_TIMED, due, 1000)
  bulk('ZADD', K_READY, moved, 1000)
end

-- Take the lowest ready indexes, a page of limit + m at a time (so one
-- page is enough unless events are not yet due), skipping excluded ones
-- and (only after the clock moved back) ones not yet due. Each candidate's
-- record is read once, in one HMGET.
local claimed, records, not_yet = {}, {}, {}
local offset, page = 0, limit + m
while #claimed < limit do
  local chunk = redis.call('ZRANGE', K_READY, offset, offset + page - 1)
  if #chunk == 0 then break end
  offset = offset + #chunk
  for _, member in ipairs(chunk) do
    -- Record fields and commands use the member string as it is.
    local i = member
    if not excluded[tonumber(i)] then
      local r = rec(i)
      local lease = tonumber(r.x or '')
      local retry = tonumber(r.r or '')
      if (r.h and lease and lease > NOW) or (retry and retry > NOW) then
        not_yet[#not_yet + 1] = { i, r }
      else
        claimed[#claimed + 1] = i
        records[#records + 1] = r
        if #claimed == limit then break end
      end
    end
  end
  if #chunk < page then break end
end
for _, entry in ipairs(not_yet) do reslot(entry[1], entry[2]) end

if #claimed == 0 then
  -- C3: the earliest time among ready events not excluded.
  local offset = 0
  while true do
    local chunk = redis.call('ZRANGE', K_TIMED, offset, offset + m, 'WITHSCORES')
    if #chunk == 0 then return { 'settled' } end
    offset = offset + #chunk / 2
    for k = 1, #chunk, 2 do
      local i = chunk[k]
      if not excluded[tonumber(i)] then
        -- The exact time from the record (a score is a double).
        local r = redis.call('HMGET', K_REC, rf(i, 'r'), rf(i, 'h'), rf(i, 'x'))
        local at = r[1]
        if r[2] and r[3] then at = r[3] end
        return { 'busy', at or chunk[k + 1] }
      end
    end
  end
end

-- The log entries of the claimed events: one XRANGE when they lie close
-- together, else one each.
local first, last = claimed[1], claimed[#claimed]
local entries = {}
if tonumber(last) - tonumber(first) + 1 <= 2 * #claimed then
  for _, entry in ipairs(redis.call('XRANGE', K_LOG, first .. '-0', last .. '-0')) do
    entries[string.match(entry[1], '^(%d+)')] = entry
  end
else
  for _, i in ipairs(claimed) do entries[i] = log_entry(i) end
end

local reply = { 'claimed' }
local writes, retries, members, timed = {}, {}, {}, {}
for k, i in ipairs(claimed) do
  local r = records[k]
  r.a = tostring(tonumber(r.a or '0') + 1)
  r.fc = r.fc or ARGV[2]
  r.lc, r.h, r.x = ARGV[2], holder, expires
  local w = #writes
  writes[w + 1], writes[w + 2] = rf(i, 'a'), r.a
  writes[w + 3], writes[w + 4] = rf(i, 'fc'), r.fc
  writes[w + 5], writes[w + 6] = rf(i, 'lc'), r.lc
  writes[w + 7], writes[w + 8] = rf(i, 'h'), holder
  writes[w + 9], writes[w + 10] = rf(i, 'x'), expires
  if r.r then
    retries[#retries + 1] = rf(i, 'r')
    r.r = false
  end
  members[#members + 1] = i
  timed[#timed + 1] = expires
  timed[#timed + 1] = i
  reply[#reply + 1] = { entries[i][1], entries[i][2], row_values(r) }
end
bulk('HSET', K_REC, writes, 1000)
bulk('HDEL', K_REC, retries, 1000)
bulk('ZREM', K_READY, members, 1000)
bulk('ZADD', K_TIMED, timed, 1000)
touch(sum, sum.pending_count, { 'attempt_count', sum.attempt_count + #claimed })
return reply
