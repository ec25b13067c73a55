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
--          {'partial', id} when some ids exist, {'foreign', id} when an id
--          belongs to another session (nothing written, A4, A6);
--          {'no_cause', index} or {'superseded', index} for a bad cause (A7).
local n = tonumber(ARGV[4])
if n == 0 then return { 'empty', has_pending() and 1 or 0 } end

local found = {}
for k = 1, n do
  local id = ARGV[6 + (k - 1) * 7]
  local at = redis.call('HGET', K_IDS, id)
  if at then
    local index, owner = string.match(at, '^(%d+):(.*)$')
    if owner ~= SESSION then return { 'foreign', id } end
    found[#found + 1] = tonumber(index)
  end
end
if #found == n then
  table.sort(found)
  local reply = { 'retry', has_pending() and 1 or 0 }
  for _, i in ipairs(found) do reply[#reply + 1] = row(i) end
  return reply
end
if #found > 0 then
  for k = 1, n do
    local id = ARGV[6 + (k - 1) * 7]
    if redis.call('HEXISTS', K_IDS, id) == 1 then return { 'partial', id } end
  end
end

local base = frontier()
for k = 1, n do
  local cause = ARGV[6 + (k - 1) * 7 + 6]
  if cause ~= '' then
    local index, attempt = string.match(cause, '^(%d+):(%d+)$')
    index = tonumber(index)
    if index < 1 or index > base then return { 'no_cause', index } end
    if rnum(index, 'a') ~= tonumber(attempt) or rget(index, 'd') then
      return { 'superseded', index }
    end
  end
end

local first = append_events(n, 6)
touch()
publish_wake(first + n - 1, ARGV[5])
return { 'ok', first, has_pending() and 1 or 0 }
