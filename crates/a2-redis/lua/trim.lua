-- trim: removes a session's settled prefix through an index (TR1, TR2):
-- the log entries, their records and their ids, at most 10 000 per call.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: through -- the last index to remove
-- Returns: {'ok', first retained index}; {'beyond', frontier} for an index
--          past the frontier (nothing written); {'unsettled', index,
--          'pending' or 'dead-lettered'} for the first event of the range
--          that is not settled (nothing written); {'corrupted', index} when
--          an entry of the range is missing (E1, nothing written).
local through = tonumber(ARGV[5])
-- EX3: an expired session has no events to trim.
if bounds() == 0 then
  if through > 0 then return { 'beyond', 0 } end
  return { 'ok', 1 }
end
local got = redis.call('HMGET', K_META, 'event_count', 'first', 'cursor', 'updated_at', 'exp')
local frontier = tonumber(got[1] or '0')
local first = tonumber(got[2] or '1')
if through > frontier then return { 'beyond', frontier } end
if through < first then return { 'ok', first } end
local last = math.min(through, first + 9999)
-- TR2: every event of the range is settled, checked before anything goes.
-- A record is absent only for a fresh lane-less event: pending. A record
-- is a JSON object whose keys are a2's own; `"p":` or `"d":` right after
-- `{` or `,` is its key (inside a string value a quote is escaped), so a
-- find answers without decoding it.
for from = first, last, 1000 do
  local to = math.min(from + 999, last)
  local fields = {}
  for i = from, to do fields[#fields + 1] = tostring(i) end
  local records = redis.call('HMGET', K_META, unpack(fields))
  for k = 1, #fields do
    local r = records[k]
    if not r or not string.find(r, '[{,]"p":') then
      local dead = r and string.find(r, '[{,]"d":')
      return { 'unsettled', fields[k], dead and 'dead-lettered' or 'pending' }
    end
  end
end
local entries = redis.call('XRANGE', K_LOG, first .. '-0', last .. '-0')
if #entries ~= last - first + 1 then
  for k, entry in ipairs(entries) do
    if entry[1] ~= (first + k - 1) .. '-0' then return { 'corrupted', first + k - 1 } end
  end
  return { 'corrupted', first + #entries }
end
-- The records and the ids of the range go, then the entries: A5 then knows
-- only the retained events (TR4). The counters stay (TR5).
for from = 1, #entries, 500 do
  local fields = {}
  for k = from, math.min(from + 499, #entries) do
    local entry = entries[k]
    fields[#fields + 1] = tostring(first + k - 1)
    local f = entry[2]
    for j = 1, #f, 2 do
      if f[j] == 'id' then fields[#fields + 1] = '#' .. f[j + 1] break end
    end
  end
  redis.call('HDEL', K_META, unpack(fields))
end
redis.call('XTRIM', K_LOG, 'MINID', (last + 1) .. '-0')
-- Every trimmed event is settled: the claim cursor may pass them all.
local writes = { 'first', last + 1 }
if tonumber(got[3] or '0') < last then
  writes[#writes + 1] = 'cursor'
  writes[#writes + 1] = last
end
if not got[4] or tonumber(got[4]) < tonumber(NOW) then
  writes[#writes + 1] = 'updated_at'
  writes[#writes + 1] = NOW
end
redis.call('HSET', K_META, unpack(writes))
-- EX1: a trim is activity.
touch_expiry(got[5])
return { 'ok', last + 1 }
