-- complete: completes an attempt and appends the events it returned, in
-- one step (CO1-CO6).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: index
-- ARGV[5]: attempt
-- ARGV[6]: the returned ids as a JSON array (compared byte for byte, CO3)
-- ARGV[7]: n, the number of returned events
-- ARGV[8]: the returned events as the wake-up carries them, or ''
-- ARGV[9..]: 7 per event, as append.lua (cause = `{index}:{attempt}`)
-- Returns: {'invalid'} for an index outside 1..frontier (CO1);
--          {'superseded'} (CO4, CO5); {'mismatch'} when this attempt
--          completed with other ids (CO4); {'exists', id} (CO6);
--          {'done', row...} for a repeat (CO3); {'ok', first index} (CO2).
local i, attempt, returned = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local n = tonumber(ARGV[7])
local sum = summary()
if i < 1 or i > sum.event_count then return { 'invalid' } end

local si = ARGV[4]
local r = rec(si)
if r.p then
  -- A settled event has no completing attempt.
  if not r.pa or tonumber(r.pa) ~= attempt then return { 'superseded' } end
  if r.ret ~= returned then return { 'mismatch' } end
  local reply = { 'done' }
  for k = 1, n do
    local at = redis.call('HGET', K_IDS, ARGV[9 + (k - 1) * 7])
    reply[#reply + 1] = row(tonumber(at))
  end
  return reply
end
local current = tonumber(r.a or '0')
-- A released lease (no holder) cannot complete either: its attempt is over.
if current == 0 or current ~= attempt or not r.h or r.d or tonumber(r.la or '0') == attempt then
  return { 'superseded' }
end
local taken = existing_id(n, 9)
if taken then return { 'exists', taken } end

redis.call('HSET', K_REC, rf(si, 'p'), ARGV[2], rf(si, 'pa'), ARGV[5], rf(si, 'ret'), returned)
if r.r then
  redis.call('HDEL', K_REC, rf(si, 'h'), rf(si, 'x'), rf(si, 'r'))
else
  redis.call('HDEL', K_REC, rf(si, 'h'), rf(si, 'x'))
end
settle(si, r.l or nil)
local pending = sum.pending_count - 1
local fields = {}
local first = sum.event_count + 1
if n > 0 then
  pending = pending + append_events(n, 9, sum.event_count, fields)
  publish_wake(first + n - 1, ARGV[8])
end
touch(sum, pending, fields)
return { 'ok', first }
