-- append: appends a batch to a session, all or nothing (A1-A11).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: n, the number of events
-- ARGV[5]: the events as the wake-up carries them (a JSON array), or ''
--          when the batch is over the carry cap
-- ARGV[6..]: 7 per event: id, type, payload json, lane, encoded lane,
--          settled '1'|'0', cause `{index}:{attempt}` or ''
-- Returns: {'empty', has_pending} for n = 0;
--          {'ok', first index, has_pending} after writing;
--          {'retry', has_pending, row...} when every id is already in this
--          session (nothing written; rows in index order, A5);
--          {'partial', id} when some ids exist (nothing written, A6);
--          {'no_cause', index} or {'superseded', index} for a bad cause (A7).
local n = tonumber(ARGV[4])
if n == 0 then return { 'empty', has_pending() and 1 or 0 } end

-- Every id of the batch in one HMGET (in chunks for huge batches).
local ids = {}
for k = 1, n do ids[k] = ARGV[6 + (k - 1) * 7] end
local owners = {}
for from = 1, n, 1000 do
  local part = redis.call('HMGET', K_IDS, unpack(ids, from, math.min(from + 999, n)))
  for k = 1, #part do owners[from + k - 1] = part[k] end
end
local found, first_found = {}, nil
for k = 1, n do
  local index = owners[k]
  if index then
    found[#found + 1] = tonumber(index)
    first_found = first_found or ids[k]
  end
end
if #found == n then
  table.sort(found)
  local reply = { 'retry', has_pending() and 1 or 0 }
  for _, i in ipairs(found) do reply[#reply + 1] = row(i) end
  return reply
end
if first_found then return { 'partial', first_found } end

local sum = summary()
local base = sum.event_count
for k = 1, n do
  local cause = ARGV[6 + (k - 1) * 7 + 6]
  if cause ~= '' then
    local index, attempt = string.match(cause, '^(%d+):(%d+)$')
    index = tonumber(index)
    if index < 1 or index > base then return { 'no_cause', index } end
    local r = redis.call('HMGET', K_REC, rf(index, 'a'), rf(index, 'd'))
    if tonumber(r[1] or '0') ~= tonumber(attempt) or r[2] then
      return { 'superseded', index }
    end
  end
end

local fields = {}
local pending = sum.pending_count + append_events(n, 6, base, fields)
touch(sum, pending, fields)
publish_wake(base + n, ARGV[5])
return { 'ok', base + 1, pending > 0 and 1 or 0 }
