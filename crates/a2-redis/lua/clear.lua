-- clear: deletes a session entirely: events, processing records,
-- snapshots, presence, its ids and its listing (I4).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- Returns: the number of events deleted.
local deleted = 0
local start = '-'
while true do
  local entries = redis.call('XRANGE', K_LOG, start, '+', 'COUNT', 1000)
  if #entries == 0 then break end
  local ids = {}
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    for f = 1, #fields, 2 do
      if fields[f] == 'id' then ids[#ids + 1] = fields[f + 1] end
    end
  end
  redis.call('HDEL', K_IDS, unpack(ids))
  deleted = deleted + #entries
  start = '(' .. entries[#entries][1]
end
redis.call('DEL', K_LOG, K_REC, K_SUM, K_PENDING, K_READY, K_TIMED, K_LANES, K_SNAPSHOTS, K_PRESENCE)
redis.call('ZREM', K_SESSIONS, SESSION)
redis.call('ZREM', K_PENDING_SESSIONS, SESSION)
return deleted
