-- append: appends a batch to a session, all or nothing (A1, A2, A3, A4, A5,
-- A6, A7, A8, A9, A10, A11), and closes it with a close (CL6).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
--   (the body reads argument k as ARGV[O + k], up to ARGV[N]: in a batch
--   they lie in the batch's ARGV, see src/lua.rs)
-- ARGV[5]: count -- n, the number of events
-- ARGV[6]: wake -- the events as the wake-up carries them (a JSON array),
--          or '' when the batch is over the carry cap
-- ARGV[7]: holder -- the JSON text of who claims the appended events
--          (append_and_claim, AC2), or '' for a plain append
-- ARGV[8]: expires -- their lease expiry (store clock, ms), or ''
-- ARGV[9]: limit -- at most this many are claimed (0 for none)
-- ARGV[10]: expiry -- '' to leave the session's expiry, `s:{ttl}|{at}` to
--          set it (EX2; both parts empty removes it), `d:{ttl}|{at}` to set
--          it only on the session this append creates (the store's default)
-- ARGV[11]: frontier -- the frontier the append expects (A13), or ''
-- ARGV[12]: close -- '1' to close the session at the frontier the append
--          reaches, in the same step (CL6), '' otherwise
-- ARGV[13..]: events -- EVENT_STRIDE per event: id, type, payload json,
--          extras ('' or `{settled 1|0}|{due}|{cause}|{encoded lane}|{lane}`,
--          `extras` in helpers.lua)
-- Returns: {'empty', has_pending} for n = 0;
--          {'ok', first index, has_pending, claimed index...} after
--          writing;
--          {'retry', has_pending, row...} when every id is already in this
--          session (nothing written; rows in index order, A5);
--          {'partial', id} when some ids exist (nothing written, A6);
--          {'no_cause', index} or {'superseded', index} for a bad cause (A7);
--          {'trimmed', first index} for a cause trimmed away (TR3);
--          {'closed'} when the session is closed (CL2);
--          {'moved', frontier} when the frontier is not the expected one
--          (A13, nothing written).
local n = NUM[ARGV[O + 5]] or num(ARGV[O + 5])
-- The counters and every id of the batch in one HMGET.
local found_at, ids, hid1
if n == 1 then
  hid1 = '#' .. ARGV[O + 13]
  found_at = load(nil, true, hid1)
else
  ids = {}
  for k = 1, n do ids[k] = '#' .. ARGV[O + 13 + (k - 1) * EVENT_STRIDE] end
  found_at = load(ids, true)
end
if S_expired then
  -- EX3: an expired session's ids are not this session's.
  reset_expired()
  if hid1 then found_at[EXTRA] = false end
  for k = 1, n do found_at[EXTRA + k - 1] = false end
end
if n == 0 then return { 'empty', S_pending_count > 0 and 1 or 0 } end

local found, first_found = nil, nil
for k = 1, n do
  if found_at[EXTRA + k - 1] then
    found = found or {}
    found[#found + 1] = tonumber(found_at[EXTRA + k - 1])
    first_found = first_found or ARGV[O + 13 + (k - 1) * EVENT_STRIDE]
  end
end
local kind = classify(found and #found or 0, n)
if kind == 'all' then
  table.sort(found)
  local entries = {}
  for k, i in ipairs(found) do entries[k] = entry_of(tostring(i)) end
  local reply = { 'retry', S_pending_count > 0 and 1 or 0 }
  for _, row in ipairs(rows_of(entries)) do reply[#reply + 1] = row end
  return reply
end
if kind == 'some' then return { 'partial', first_found } end
-- CL2: a closed session's log is final; only replays pass.
if S_closed then return { 'closed' } end
-- A13: only at the frontier the caller expects.
local want = ARGV[O + 11]
if want ~= '' and tonumber(want) ~= S_event_count then return { 'moved', S_event_count } end

-- A7: causes name an existing index whose latest attempt they are. The
-- first bad cause in batch order decides the error, as on every store:
-- causes after a missing index are not looked at.
local base = S_event_count
local causes, cause_of, missing = nil, nil, nil
for k = 1, n do
  local e, cause = ARGV[O + 13 + (k - 1) * EVENT_STRIDE + 3], ''
  if e ~= '' then
    local _
    _, cause = extras(e)
  end
  if cause ~= '' then
    local index, attempt = string.match(cause, '^(%d+):(%d+)')
    if tonumber(index) < 1 or tonumber(index) > base then
      missing = index
      break
    end
    if not causes then causes, cause_of = {}, {} end
    causes[#causes + 1] = index
    cause_of[#causes] = tonumber(attempt)
  end
end
if causes then
  local r = recs(causes)
  for k, index in ipairs(causes) do
    local rk = r[index]
    if (rk.a or 0) ~= cause_of[k] or rk.d or rk.c then
      -- TR3: an index below the first retained one was trimmed away.
      local first = tonumber(redis.call('HGET', K_META, 'first') or '1')
      if tonumber(index) < first then return { 'trimmed', first } end
      return { 'superseded', index }
    end
  end
end
if missing then return { 'no_cause', missing } end

-- EX2: this append's expiry, or the default of a session it creates.
local x = ARGV[O + 10]
if x ~= '' and (string.byte(x, 1) == 115 or S_event_count == 0) then set_exp(string.sub(x, 3)) end
local limit = NUM[ARGV[O + 9]] or num(ARGV[O + 9])
-- PS2: a session with pending work of which none is claimable (every
-- lane-less event passed by the cursor, nothing ready, nothing due): the
-- new work is announced below, as if its pending count rose from zero.
-- (A cursor behind the frontier means claimable work: nothing to read.)
-- The new pending events (not settled) and whether every event is plain
-- (extras '': none settled, delayed, caused or in a lane), in one pass.
local pending_new, plain = 0, true
for k = 1, n do
  local e = ARGV[O + 13 + (k - 1) * EVENT_STRIDE + 3]
  if e ~= '' then plain = false end
  if string.byte(e, 1) ~= 49 then pending_new = pending_new + 1 end
end
-- An append that claims every event it brings (all plain, the limit no
-- lower than their number) announces nothing whatever the queues hold:
-- it does not read them.
local idle = S_pending_count > 0 and S_cursor == S_event_count
  and not (plain and limit >= n)
  and redis.call('ZCARD', key('ready')) == 0
  and #redis.call('ZRANGEBYSCORE', K_TIMED, '-inf', NOW_S, 'LIMIT', 0, 1) == 0
local claimed = append_events(ARGV, n, O + 13, limit, ARGV[O + 7], ARGV[O + 8], ids, hid1)
-- AC5: announced unless every new pending event was claimed (in a
-- group, by every append of it).
S_claimed_all = S_claimed_all ~= false and #claimed == pending_new
flush(true)
if idle and #claimed < pending_new then redis.call(PUBLISH, key('work'), SESSION) end
publish_wake(S_ec_s, ARGV[O + 6])
if ARGV[O + 12] == '1' then
  -- CL6: closed at the frontier it reached, in the same step; later
  -- appends of a group see it (CL2), and its feeds read once more and end
  -- after the last event (CL4), as after `close.lua`.
  redis.call('HSET', K_META, 'closed', S_ec_s, 'closed_at', NOW)
  S_closed = true
  if S_followers then
    redis.call(PUBLISH, events_channel(), '{"f":' .. S_ec_s .. ',"c":1}')
  end
end
local pending = S_pending_count > 0 and 1 or 0
-- The common replies as values (`reply_of` in helpers.lua), as text (the
-- frontier's, for one event): a batch joins them into one string of its
-- reply without a table of their own. Longer ones are built whole: a
-- table grown past its constructor is rebuilt at every power of two.
local first = n == 1 and S_ec_s or fmt('%d', base + 1)
if not claimed[1] then return 'ok', first, TEXT[pending] or text(pending) end
if not claimed[2] then return 'ok', first, TEXT[pending] or text(pending), claimed[1] end
local reply = { 'ok', base + 1, pending }
for k, i in ipairs(claimed) do reply[3 + k] = i end
return reply
