-- claim: leases the ready events of a session to a holder (C1, C2, C3, C4, C5, C6, C7).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: holder
-- ARGV[6]: expires -- the lease expiry (store clock, ms)
-- ARGV[7]: limit -- at least 1
-- ARGV[8]: entries -- '1' to return the claimed log entries too, '' not to
-- ARGV[9..]: excluded -- indexes the caller excludes (any order)
-- Returns: {'settled'} (C1, C4); {'busy', retry_at} (C3);
--          {'claimed', next_at or false, index, record JSON, ...} in index
--          order (C2, C7), the client reading the claimed log entries
--          itself; with `entries`, {'rows', next_at or false, index,
--          record JSON, log entry, ...} instead, for a client whose every
--          call is a round trip (REST); {'corrupted', index} when the log
--          has a hole (E1), nothing written.
--
-- Claimable events come from two places, merged by index: the ready set
-- (lane heads, released and failed events, expired leases) and the
-- indexes past the claim cursor, where every event without a record is a
-- lane-less unsettled one that was never claimed (append writes a record
-- for lane and settled events). The cursor only moves forward, over
-- events it hands out or that are not its business, so each event is
-- scanned there once. Over RESP the log entries never pass through Lua:
-- turning them into Lua tables and back costs more than the rest of a
-- claim, and the client's read of them is pipelined. Over REST a second
-- call is a second HTTP request, which costs more: there they come back
-- with the claim (`entries`).
load(nil, true)
local ready_key = key('ready')
if S_pending_count == 0 then return { 'settled' } end
-- E1: the log is dense up to its frontier, so its length is the event
-- count (O(1)) less the events trimmed (TR1, read only for a trimmed
-- session); on a mismatch, find the first hole (rare and slow).
local length = redis.call('XLEN', K_LOG)
local expect = 1
if length ~= S_event_count then
  expect = tonumber(redis.call('HGET', K_META, 'first') or '1')
end
if length ~= S_event_count - expect + 1 then
  while expect <= S_event_count do
    local chunk = redis.call('XRANGE', K_LOG, expect .. '-0', '+', 'COUNT', 100)
    if #chunk == 0 then return { 'corrupted', expect } end
    for _, entry in ipairs(chunk) do
      if tonumber(string.match(entry[1], '^(%d+)')) ~= expect then return { 'corrupted', expect } end
      expect = expect + 1
    end
  end
  return { 'corrupted', S_event_count + 1 }
end
local holder, expires, limit = ARGV[5], ARGV[6], ARGV[7] + 0
local with_entries = ARGV[8] == '1'
local excluded, m = {}, #ARGV - 8
for k = 9, #ARGV do excluded[ARGV[k]] = true end

-- Leases and retry times that have come due: their events are ready.
local due = redis.call('ZRANGEBYSCORE', K_TIMED, '-inf', NOW_S)
if #due > 0 then
  local moved = {}
  for _, member in ipairs(due) do
    moved[#moved + 1] = member
    moved[#moved + 1] = member
  end
  bulk('ZREM', K_TIMED, due, 1000)
  bulk('ZADD', ready_key, moved, 1000)
end

-- Candidates of the ready set: the lowest limit + m (one page unless
-- events are not yet due after the clock moved back).
local from_ready, records = {}, {}
local not_yet = {}
local offset, page = 0, limit + m
while #from_ready < limit do
  local chunk = redis.call('ZRANGE', ready_key, offset, offset + page - 1)
  if #chunk == 0 then break end
  offset = offset + #chunk
  local wanted = {}
  for _, i in ipairs(chunk) do
    if not excluded[i] then wanted[#wanted + 1] = i end
  end
  local r = recs(wanted)
  for _, i in ipairs(wanted) do
    local ri = r[i]
    if not claimable(ri, NOW) then
      not_yet[#not_yet + 1] = i
      records[i] = ri
    elseif #from_ready < limit then
      from_ready[#from_ready + 1] = i
      records[i] = ri
    end
  end
  if #chunk < page then break end
end
for _, i in ipairs(not_yet) do reslot(i, records[i]) end

-- Candidates past the cursor: the events without a record.
-- (None can come before a full page of ready events below the cursor.)
local fresh = {}
local scanned = S_cursor
local to_ready = {}
local full = #from_ready == limit and from_ready[limit] + 0 <= S_cursor
while not full and #fresh < limit and scanned < S_event_count do
  local want = math.min(limit - #fresh, S_event_count - scanned, 1000)
  local indexes = {}
  for k = 1, want do indexes[k] = fmt('%d', scanned + k) end
  local v = redis.call('HMGET', K_META, unpack(indexes))
  for k = 1, want do
    if not v[k] then
      local i = indexes[k]
      if excluded[i] then
        -- Excluded now but claimable later: it moves to the ready set so
        -- that the cursor can pass it (below, once the cursor is known).
        to_ready[#to_ready + 1] = i
      else
        fresh[#fresh + 1] = i
      end
    end
  end
  scanned = scanned + want
end
-- Merge by index and take the first `limit`.
local claimed = {}
local a, b = 1, 1
while #claimed < limit and (a <= #from_ready or b <= #fresh) do
  if b > #fresh or (a <= #from_ready and from_ready[a] + 0 < fresh[b] + 0) then
    claimed[#claimed + 1] = from_ready[a]
    a = a + 1
  else
    claimed[#claimed + 1] = fresh[b]
    b = b + 1
  end
end
-- The cursor passes every scanned event but the first fresh one not taken.
if b <= #fresh then S_cursor = fresh[b] - 1 else S_cursor = scanned end
-- The excluded events the cursor passed wait in the ready set; those it
-- did not pass are scanned again (in the ready set too, one would be
-- claimable twice).
local passed = {}
for _, i in ipairs(to_ready) do
  if i + 0 <= S_cursor then
    passed[#passed + 1] = i
    passed[#passed + 1] = i
  end
end
if #passed > 0 then bulk('ZADD', ready_key, passed, 1000) end

-- C3, C7: the earliest time among leased or waiting events not excluded
-- (the events claimed here are not in the timed set yet).
local function earliest()
  local offset = 0
  while true do
    local chunk = redis.call('ZRANGE', K_TIMED, offset, offset + m, 'WITHSCORES')
    if #chunk == 0 then return nil end
    offset = offset + #chunk / 2
    for k = 1, #chunk, 2 do
      local i = chunk[k]
      if not excluded[i] then
        -- A score is the record's time as a double: exact below 2^53 (any
        -- store time in practice), so the record is read only beyond.
        local score = tonumber(chunk[k + 1])
        if score and score > -9007199254740992 and score < 9007199254740992 then
          return score
        end
        local r = rec(i)
        local at = r.r
        if r.h and r.x then at = r.x end
        return at or chunk[k + 1]
      end
    end
  end
end

if #claimed == 0 then
  flush(false)
  local at = earliest()
  if at == nil then return { 'settled' } end
  return { 'busy', at }
end

local reply = { with_entries and 'rows' or 'claimed', earliest() or false }
local timed = {}
-- A fresh event's record.
local fresh_rec = first_lease(cjson.encode(holder), expires)
local noted = false
for _, i in ipairs(claimed) do
  local r, text = records[i], fresh_rec
  if not r and not noted then
    note_leased(fresh_rec)
    noted = true
  end
  if r then
    r.a = (r.a or 0) + 1
    r.fc = r.fc or NOW_S
    r.lc, r.h, r.x, r.r = NOW_S, holder, expires, nil
    text = cjson.encode(r)
  end
  put(i, text)
  reply[#reply + 1] = i
  reply[#reply + 1] = text
  if with_entries then
    -- (E1 was checked above: the entry is there.)
    reply[#reply + 1] = redis.call('XRANGE', K_LOG, i .. '-0', i .. '-0')[1] or false
  end
  timed[#timed + 1] = expires
  timed[#timed + 1] = i
end
local members = {}
for k = 1, a - 1 do members[k] = from_ready[k] end
bulk('ZREM', ready_key, members, 1000)
bulk('ZADD', K_TIMED, timed, 1000)
S_attempt_count = S_attempt_count + #claimed
flush(true)
return reply
