-- fork_read: reads one bounded part of a session for a fork of it (FK1,
-- FK2): the records of a range of its events, their log entries, or its
-- snapshots. Each answer says where the session stands, so the forking
-- client can tell it was not cleared, trimmed into the range or expired
-- between its reads.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: at -- the fork's last index
-- ARGV[6]: part -- 'records', 'entries' or 'snapshots'
-- ARGV[7]: from -- the range's first index (records, entries)
-- ARGV[8]: to -- the range's last index (records, entries)
-- Returns: {'none'} for a session without events (or expired, EX3);
--          else {'ok', frontier, first retained index, id of the event at
--          `at` (nil when there is none), items...}: for 'records' the
--          record of each index of the range (nil for a fresh event), for
--          'entries' the range's {entry id, fields} (fewer when some are
--          missing), for 'snapshots' reducer, value, ... (the hash).
local ec, first = bounds()
if ec == 0 then return { 'none' } end
local at = ARGV[5]
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
if part == 'records' then
  local fields = {}
  for i = tonumber(ARGV[7]), tonumber(ARGV[8]) do fields[#fields + 1] = fmt('%d', i) end
  if #fields > 0 then
    local records = redis.call('HMGET', K_META, unpack(fields))
    for k = 1, #fields do reply[4 + k] = records[k] or false end
  end
elseif part == 'entries' then
  local entries = redis.call('XRANGE', K_LOG, ARGV[7] .. '-0', ARGV[8] .. '-0')
  for k = 1, #entries do reply[4 + k] = entries[k] end
else
  local snapshots = redis.call('HGETALL', key('snapshots'))
  for k = 1, #snapshots do reply[4 + k] = snapshots[k] end
end
return reply
