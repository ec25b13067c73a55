-- fork_read: reads a session for a fork of it (FK1, FK2, FK6), in one of
-- three parts. 'dump' takes the whole session in one step: the server's
-- own serialization of each of its keys (`DUMP`, which the target's
-- partition `RESTORE`s under hidden names), with what the fork must
-- remove or change in the copy: the events after the fork's index, the
-- leased events, the snapshots past the index. It declines ('far') a
-- session larger than `limit` events or with more than `tail` after the
-- index; those are copied page by page instead: 'records' reads the
-- records of a range, 'snapshots' the snapshots. Each answer says where
-- the session stands, so the forking client can tell it was not cleared,
-- trimmed into the range or expired between its reads.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: at -- the fork's last index
-- ARGV[6]: part -- 'dump', 'records' or 'snapshots'
-- ARGV[7]: from -- the range's first index (records); the most events of
--          a session dumped (dump)
-- ARGV[8]: to -- the range's last index (records); the most events after
--          the index (dump)
-- Returns: {'none'} for a session without events (or expired, EX3);
--          else {'ok', frontier, first retained index, id of the event at
--          `at` (nil when there is none), items...}: for 'records' the
--          record of each index of the range (nil for a fresh event); for
--          'snapshots' the session's first_event_at, then reducer, value,
--          ... (the hash); for 'dump' either 'far', or 'dump' followed by
--          the dumps of log, meta, ready, timed, lanes and snapshots (nil
--          for a key that does not exist), {pending_count, failed_count,
--          attempt_count, failure_count, first_event_at, cursor}, the ids
--          of the events after `at`, their records, how many members
--          timed has, the members of timed then of ready, their records,
--          and the snapshots hash.
local ec, first = bounds()
if ec == 0 then return { 'none' } end
local at = ARGV[5]
local at_n = tonumber(at)
local at_id = false
local found = redis.call('XRANGE', K_LOG, at .. '-0', at .. '-0')
if found[1] then
  local f = found[1][2]
  for j = 1, #f, 2 do
    if f[j] == 'id' then at_id = f[j + 1] break end
  end
end
local reply = { 'ok', ec, first, at_id }
local part = ARGV[6]
local function records_of(fields)
  local out = {}
  if #fields > 0 then
    for s = 1, #fields, 1000 do
      local got = redis.call('HMGET', K_META, unpack(fields, s, math.min(s + 999, #fields)))
      for k = 1, #got do out[#out + 1] = got[k] or false end
    end
  end
  return out
end
if part == 'records' then
  local fields = {}
  for i = tonumber(ARGV[7]), tonumber(ARGV[8]) do fields[#fields + 1] = fmt('%d', i) end
  local records = records_of(fields)
  for k = 1, #records do reply[4 + k] = records[k] end
elseif part == 'snapshots' then
  reply[5] = redis.call('HGET', K_META, 'first_event_at') or '0'
  local snapshots = redis.call('HGETALL', key('snapshots'))
  for k = 1, #snapshots do reply[5 + k] = snapshots[k] end
else
  if ec - first + 1 > tonumber(ARGV[7]) or ec - at_n > tonumber(ARGV[8]) then
    reply[5] = 'far'
    return reply
  end
  reply[5] = 'dump'
  for _, k in ipairs({ K_LOG, K_META, key('ready'), K_TIMED, key('lanes'), key('snapshots') }) do
    reply[#reply + 1] = redis.call('DUMP', k) or false
  end
  local c = redis.call('HMGET', K_META, 'pending_count', 'failed_count', 'attempt_count',
    'failure_count', 'first_event_at', 'cursor')
  for k = 1, 6 do c[k] = c[k] or '0' end
  reply[#reply + 1] = c
  local ids, fields = {}, {}
  if ec > at_n then
    for _, entry in ipairs(redis.call('XRANGE', K_LOG, (at_n + 1) .. '-0', '+')) do
      local f = entry[2]
      for j = 1, #f, 2 do
        if f[j] == 'id' then ids[#ids + 1] = f[j + 1] break end
      end
      fields[#fields + 1] = string.match(entry[1], '^(%d+)')
    end
  end
  reply[#reply + 1] = ids
  reply[#reply + 1] = records_of(fields)
  -- Leases live on events of timed, or of ready once a claim found them
  -- expired and left them there.
  local held = redis.call('ZRANGE', K_TIMED, 0, -1)
  reply[#reply + 1] = #held
  for _, m in ipairs(redis.call('ZRANGE', key('ready'), 0, -1)) do held[#held + 1] = m end
  reply[#reply + 1] = held
  reply[#reply + 1] = records_of(held)
  reply[#reply + 1] = redis.call('HGETALL', key('snapshots'))
end
return reply
