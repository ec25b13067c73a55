-- complete: completes an attempt and appends the events it returned, in
-- one step (CO1, CO2, CO3, CO4, CO5, CO6).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
--   (the body reads argument k as ARGV[O + k], up to ARGV[N]: in a batch
--   they lie in the batch's ARGV, see src/lua.rs)
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
--          {'done', row...} for a repeat (CO3); {'ok', first index} (CO2;
--          0 when it returned no events); {'closed'} when it returned
--          events to a closed session (CL3). A trimmed index has no
--          record: `superseded` (TR3).
local si, at, returned = ARGV[O + 5], ARGV[O + 6], N > O + 6 and ARGV[O + 7] or nil
local n, fields, got = 0, nil, nil
-- The counters, the record and the returned ids in one HMGET.
if returned then
  n = ARGV[O + 8] + 0
  fields = { si }
  for k = 1, n do fields[k + 1] = '#' .. ARGV[O + 10 + (k - 1) * EVENT_STRIDE] end
  got = load(fields, true)
else
  returned = '[]'
  -- Alone, the common completion reads only what settling needs.
  if GROUP then got = load(nil, true, si) else got = load_settling(si) end
end
-- EX3: an expired session has no events to complete (CO1).
if S_expired then return { 'invalid' } end

-- The common case: the attempt in progress completes (CO2), no events
-- returned, and its record is the common one, as claim.lua and append.lua
-- write it: `{"a":N,"fc":"T","lc":"T","h":"holder","x":"T"}`, fields known
-- and in a fixed order. It is checked and rewritten without cjson
-- (`COMMON_RECORD` in helpers.lua): the holder is a JSON string, where no
-- unescaped quote occurs, so the first `","x":"` after it ends it. A
-- record exists only for an index in 1..frontier, so CO1 holds.
local stored = got[EXTRA]
if stored and n == 0 then
  -- One anchored match: the attempt's text (compared with ours as
  -- strings, which Lua interns: no number conversion) and the position
  -- after `lc`'s closing quote; or, for a first lease an append or claim
  -- of this library state wrote, the part it keeps, looked up (`LEASED`).
  local kept = at == '1' and LEASED[stored]
  local a = kept and at
  if not kept then
    local h
    a, h = string.match(stored, COMMON_RECORD)
    if a == at then kept = string.sub(stored, 1, h - 1) end
  end
  if a == at then
    -- Up to the closing quote of `lc`, then what completing adds.
    if returned == '[]' then
      put(si, kept .. settled_tail(at))
    else
      put(si, kept .. ',"p":"' .. NOW_S .. '","pa":' .. at .. ',"ret":' ..
        cjson.encode(returned) .. '}')
    end
    if GROUP then
      -- The group's end takes its settled events out of the queues at once.
      local settled = S_settled
      if settled then settled[#settled + 1] = si else S_settled = { si } end
    elseif redis.call('ZREM', K_TIMED, si) == 0 then
      redis.call('ZREM', key('ready'), si)
    end
    S_pending_count = S_pending_count - 1
    flush(true)
    return 'ok', '0'
  end
end

-- Anything else needs every counter.
if S_settling then got = load(nil, true, si) end
local attempt = at + 0
local i = si + 0
if i < 1 or i > S_event_count then return { 'invalid' } end
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
-- CL3: a closed session's events settle, but it takes no new ones.
if n > 0 and S_closed then return { 'closed' } end
for k = 1, n do
  if got[EXTRA + k] then return { 'exists', string.sub(fields[k + 1], 2) } end
end

r.p, r.pa, r.ret, r.h, r.x, r.r = NOW_S, attempt, returned, nil, nil, nil
put_rec(si, r)
settle(si, r)
S_pending_count = S_pending_count - 1
local first = S_event_count + 1
if n > 0 then
  append_events(ARGV, n, O + 10)
end
flush(true)
if n > 0 then publish_wake(S_ec_s, ARGV[O + 9]) end
return 'ok', fmt('%d', first)
