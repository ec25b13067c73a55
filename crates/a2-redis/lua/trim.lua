-- trim: removes a session's settled prefix through an index (TR1, TR2):
-- the log entries, their records and their ids, at most 10 000 per call.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: through -- the last index to remove
-- ARGV[6..]: ids -- `#{event id}` of each event of the log from the first
--            retained one, in index order, through `through` or the 10 000th
-- Returns: {'ok', first retained index}; {'beyond', frontier} for an index
--          past the frontier (nothing written); {'unsettled', index,
--          'pending' or 'dead-lettered'} for the first event of the range
--          that is not settled (nothing written); {'corrupted', index} when
--          an entry of the range is missing (E1, nothing written);
--          {'stale'} when the ids are not the log's now (nothing written).
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
-- The log's ids of the range, as the client read them (ARGV[6..], `#id`,
-- in index order from the first retained event): an XRANGE here cost
-- more than the rest of the trim, since Lua builds a table of every
-- entry's fields. The id index turns them into the field names of their
-- records (`#id` -> index text, no number-to-text conversion) and proves
-- the read current: each must name the index of its place. A place that
-- does not (the client read before another trim, or before the session
-- was cleared and written again) is a stale read, retried by the client,
-- unless its entry is missing from the log: a hole (E1).
local function mismatch(index)
  local entry = redis.call('XRANGE', K_LOG, index .. '-0', index .. '-0')
  if #entry == 0 then return { 'corrupted', index } end
  return { 'stale' }
end
local count, given = last - first + 1, math.min(#ARGV - 5, last - first + 1)
-- Page by page, the ids, then their records: a refusal reads no further
-- than the page of the first unsettled event (a session held at its first
-- index, by a dead letter or an event delayed for days, stops at the
-- first page).
local names = {}
for from = 1, given, 1000 do
  local to = math.min(from + 999, given)
  local at = redis.call('HMGET', K_META, unpack(ARGV, 5 + from, 5 + to))
  for k = 1, to - from + 1 do
    local index = first + from + k - 2
    if tonumber(at[k]) ~= index then return mismatch(index) end
    names[from + k - 1] = at[k]
  end
  local records = redis.call('HMGET', K_META, unpack(names, from, to))
  for k = 1, to - from + 1 do
    local refused = refusal(names[from + k - 1], records[k])
    if refused then return refused end
  end
end
if given < count then return mismatch(first + given) end
-- The records and the ids of the range go, then the entries: A5 then knows
-- only the retained events (TR4). The counters stay (TR5).
for from = 1, count, 1000 do
  local to = math.min(from + 999, count)
  redis.call('HDEL', K_META, unpack(names, from, to))
  redis.call('HDEL', K_META, unpack(ARGV, 5 + from, 5 + to))
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
