-- complete: completes an attempt and appends the events it returned, in
-- one step (CO1-CO6).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: index
-- ARGV[6]: attempt
-- (the rest may be absent: a completion that returns no events)
-- ARGV[7]: returned -- the returned ids as a JSON array (compared byte for
--          byte, CO3)
-- ARGV[8]: count -- n, the number of returned events
-- ARGV[9]: wake -- the returned events as the wake-up carries them, or ''
-- ARGV[10..]: events -- EVENT_STRIDE per event, as append.lua (cause =
--          `{index}:{attempt}`)
-- Returns: {'invalid'} for an index outside 1..frontier (CO1);
--          {'superseded'} (CO4, CO5); {'mismatch'} when this attempt
--          completed with other ids (CO4); {'exists', id} (CO6);
--          {'done', row...} for a repeat (CO3); {'ok', first index} (CO2).
local si, attempt, returned = ARGV[5], ARGV[6] + 0, ARGV[7]
local n, fields, got = 0, nil, nil
-- The counters, the record and the returned ids in one HMGET.
if returned then
  n = ARGV[8] + 0
  fields = { si }
  for k = 1, n do fields[k + 1] = '#' .. ARGV[10 + (k - 1) * EVENT_STRIDE] end
  got = load(fields, true)
else
  returned = '[]'
  got = load(nil, true, si)
end
local i = si + 0
if i < 1 or i > S.event_count then return { 'invalid' } end

-- The common record, as claim.lua writes it, is read without cjson: its
-- fields are known and in a fixed order,
-- `{"a":N,"fc":"T","lc":"T","h":"holder","x":"T"}`. The holder is a JSON
-- string, where no unescaped quote occurs, so the first `","x":"` after
-- it ends it. (Plain finds: a lazy pattern for the holder tried the rest
-- of the pattern at each of its characters.)
local stored = got[EXTRA]
local fa, ffc, flc
if stored then
  local hs
  fa, ffc, flc, hs = string.match(stored, '^{"a":(%d+),"fc":"(%d+)","lc":"(%d+)","h":()"')
  if fa then
    local xs = string.find(stored, '","x":"', hs + 1, true)
    if not (xs and string.find(stored, '^%d+"}$', xs + 7)) then fa = nil end
  end
end
if fa and fa + 0 == attempt and n == 0 then
  -- The attempt in progress completes (CO2), no events returned.
  local ret = returned == '[]' and '"[]"' or cjson.encode(returned)
  put(si, '{"a":' .. fa .. ',"fc":"' .. ffc .. '","lc":"' .. flc .. '","p":"' .. NOW_S ..
    '","pa":' .. fa .. ',"ret":' .. ret .. '}')
  if GROUP then
    -- The group's end takes its settled events out of the queues at once.
    local settled = S.settled
    if settled then settled[#settled + 1] = si else S.settled = { si } end
  elseif redis.call('ZREM', K_TIMED, si) == 0 then
    redis.call('ZREM', K_READY, si)
  end
  S.pending_count = S.pending_count - 1
  flush(true)
  return { 'ok', S.event_count + 1 }
end
local r = decode(stored)
if r.p then
  -- A settled event has no completing attempt.
  if not r.pa or r.pa ~= attempt then return { 'superseded' } end
  if r.ret ~= returned then return { 'mismatch' } end
  local entries = {}
  for k = 1, n do
    if not got[EXTRA + k] then return { 'mismatch' } end
    entries[k] = entry_of(got[EXTRA + k])
  end
  local reply = { 'done' }
  for _, row in ipairs(rows_of(entries)) do reply[#reply + 1] = row end
  return reply
end
local current = r.a or 0
-- A released lease (no holder) cannot complete either: its attempt is over.
if current == 0 or current ~= attempt or not r.h or r.d or (r.la or 0) == attempt then
  return { 'superseded' }
end
for k = 1, n do
  if got[EXTRA + k] then return { 'exists', string.sub(fields[k + 1], 2) } end
end

r.p, r.pa, r.ret, r.h, r.x, r.r = NOW_S, attempt, returned, nil, nil, nil
put_rec(si, r)
settle(si, r)
S.pending_count = S.pending_count - 1
local first = S.event_count + 1
if n > 0 then
  append_events(ARGV, n, 10)
end
flush(true)
if n > 0 then publish_wake(first + n - 1, ARGV[9]) end
return { 'ok', first }
