-- read_state: a reducer's snapshot, the frontier and the first page of
-- events after the snapshot, in one atomic step (S1). Events are
-- immutable, so the caller reads later pages up to the same frontier.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: reducer -- the reducer name
-- ARGV[6]: count -- the page size
-- Returns: {frontier, first retained index, snapshot
--          `{index}|{updated_at}|{state}` or nil, entry...} with each entry
--          {entry id, {field, value, ...}}; no entries when some after the
--          snapshot were trimmed (the caller reports `Trimmed`, TR3).
local last, first, _, _, expired = bounds()
-- EX3: an expired session's snapshots are gone with it.
local snapshot = not expired and redis.call('HGET', key('snapshots'), ARGV[5])
local after = 0
if snapshot then after = tonumber(string.match(snapshot, '^(%d+)|')) end
local reply = { last, first, snapshot }
if after < last and after + 1 >= first then
  local entries = redis.call('XRANGE', K_LOG, string.format('%d-0', after + 1),
    string.format('%d-0', last), 'COUNT', tonumber(ARGV[6]))
  for _, entry in ipairs(entries) do reply[#reply + 1] = entry end
end
return reply
