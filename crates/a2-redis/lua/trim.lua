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
-- is a JSON object whose keys are a2's own and whose values are numbers
-- and strings (what an attempt returned is kept as a JSON string), where
-- every quote is escaped: an unescaped `"p":` or `"d":` can only be that
-- key, so a plain find (a memchr, not a pattern) answers without decoding.
-- The refusal for the record of index `name`, or nil when it is settled.
local function refusal(name, record)
  if record and string.find(record, '"p":', 1, true) then return nil end
  local dead = record and string.find(record, '"d":', 1, true)
  return { 'unsettled', name, dead and 'dead-lettered' or 'pending' }
end
-- A session held at its first index (a dead letter, an event delayed for
-- days: retention trims up to it, then asks again at every step) is
-- refused at once, without reading a page of entries.
local head = tostring(first)
local held = refusal(head, redis.call('HGET', K_META, head))
if held then return held end
-- Page by page: the entries, then their records; a refusal reads no
-- further than the page of the first unsettled event. The log has no hole
-- (E1), so as many entries as indexes are exactly those indexes, and each
-- entry's stream id (`{index}-0`) gives the index's field name without a
-- number-to-text conversion (a `tostring` in Lua is a printf).
local entries, names = {}, {}
for from = first, last, 1000 do
  local to = math.min(from + 999, last)
  local page = redis.call('XRANGE', K_LOG, from .. '-0', to .. '-0')
  if #page ~= to - from + 1 then
    for k, entry in ipairs(page) do
      if entry[1] ~= (from + k - 1) .. '-0' then return { 'corrupted', from + k - 1 } end
    end
    return { 'corrupted', from + #page }
  end
  local base = #names
  for k = 1, #page do
    entries[base + k] = page[k]
    names[base + k] = string.sub(page[k][1], 1, -3)
  end
  local records = redis.call('HMGET', K_META, unpack(names, base + 1, base + #page))
  for k = 1, #page do
    local refused = refusal(names[base + k], records[k])
    if refused then return refused end
  end
end
-- The records and the ids of the range go, then the entries: A5 then knows
-- only the retained events (TR4). The counters stay (TR5).
for from = 1, #entries, 500 do
  local fields = {}
  for k = from, math.min(from + 499, #entries) do
    fields[#fields + 1] = names[k]
    local f = entries[k][2]
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
