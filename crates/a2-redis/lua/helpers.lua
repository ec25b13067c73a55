-- Shared helpers, run inside every session script after the prelude that
-- src/lua.rs generates (the K_* key names, SESSION, NOW and NOW_S (its
-- text), EVENTS (read through `events_channel()`), WORK, EVENT_STRIDE,
-- all set by `enter`), so each script is one atomic unit with them.
-- Helpers never read ARGV or KEYS: a batch script runs several
-- operations, each with its own.
--
-- The session's hash `K_META` holds three kinds of fields (see
-- docs/redis-layout.md): the summary counters (lowercase words), the id
-- index (`#{event id}` -> index) and the packed processing records
-- (`{index}` -> JSON object). One HMGET reads what a write needs of all
-- three, and one HSET (`flush`) writes it back.

-- Integers become text through `%d`: Lua's `tostring` and the number
-- arguments of `redis.call` go through `%.14g` / `%.17g`, whose
-- floating-point printing costs about twice as many instructions.
local fmt = string.format

-- Summary counters, read by `load` in this order; a `hot` load (every
-- write but a failure and a revive, which alone change the last two)
-- reads the first eight. `followers` is no counter of events: the server
-- time until which store instances follow the session with live feeds
-- (`lua/follow.lua`); wake-ups are published only until then. `closed` is the frontier of the
-- session's close (CL1), absent while it is open; `exp` its expiry (EX1),
-- absent while it has none.
local SUM = { 'event_count', 'pending_count', 'attempt_count', 'updated_at', 'cursor',
  'in_pending', 'followers', 'closed', 'exp', 'failed_count', 'failure_count' }

-- ST2: whether live feeds follow the session, by its `followers` field
-- (the server time, ms, its mark lasts until; `lua/follow.lua`). The mark
-- runs on the server's clock, as key expiry does, not on the store clock:
-- the instances that refresh it keep real time whatever clock the store
-- was given.
local function following(until_ms)
  if not until_ms then return false end
  local t = redis.call('TIME')
  return until_ms + 0 > t[1] * 1000 + math.floor(t[2] / 1000)
end

-- EX1: a session's expiry as its `exp` field keeps it, `{ttl}|{expires_at}`
-- (either part may be empty): its ttl and expiry time, numbers or nil.
local function parse_exp(text)
  if not text then return nil, nil end
  local ttl, at = string.match(text, '^(%d*)|(%-?%d*)$')
  return tonumber(ttl), tonumber(at)
end

-- EX3: for a script that does not `load`: the session's frontier, first
-- retained index, close frontier (or false) and deadline (or nil), read in
-- one HMGET; an expired session reads as one without events.
local function bounds()
  local v = redis.call('HMGET', K_META, 'event_count', 'first', 'closed', 'exp', 'updated_at')
  local ttl, at = parse_exp(v[4])
  local d = deadline_of(ttl, at, tonumber(v[5] or '0'))
  if has_expired(d, NOW) then return 0, 1, false, nil, true end
  return tonumber(v[1] or '0'), tonumber(v[2] or '1'), v[3], d, false
end

-- The session's state for this script, in locals of the chunk (`S_*`,
-- upvalues of every function after them), not in a table: a table per
-- load (allocated, sized, each field a new key, collected) cost as much as
-- its HMGET, and every field read or write a lookup. The counters
-- (numbers, nil when not loaded); as loaded (`L_*`, which `flush`
-- compares them with); the number of writes queued for the one HSET of
-- `flush` (`S_nw`, in `W`); and what a group or an operation notes on
-- the way (the group's cache of its writes, held wake-up and leases,
-- settled events; whether `flush` was called and touched; whether every
-- append claimed all its events; the frontier's text; a settling load).
-- Costs matter here: every write runs `load` and `flush`, so they build
-- no tables they can avoid and convert each counter from text once
-- (`+ 0`, one `strtod`, where `tonumber` costs two and a call).
local S_event_count, S_pending_count, S_failed_count, S_attempt_count, S_failure_count
local S_cursor, S_updated_at, S_in_pending, S_nw, S_followers, S_closed
-- The session's ttl and expiry time (EX1), and whether it expired (EX3):
-- an expired session's counters load as an unknown session's.
local S_ttl, S_xat, S_expired
local L_event_count, L_pending_count, L_failed_count, L_attempt_count, L_failure_count
local L_cursor
local S_cache, S_flushed, S_touched, S_wake, S_timed, S_settled, S_claimed_all, S_ec_s
local S_settling

-- Forgets the session state (every `S_*` and `L_*` nil).
local function reset_state()
  S_event_count, S_pending_count, S_failed_count, S_attempt_count = nil, nil, nil, nil
  S_failure_count, S_cursor, S_updated_at, S_in_pending, S_nw = nil, nil, nil, nil, nil
  S_followers, S_closed = nil, nil
  S_ttl, S_xat, S_expired = nil, nil, nil
  L_event_count, L_pending_count, L_failed_count, L_attempt_count = nil, nil, nil, nil
  L_failure_count, L_cursor = nil, nil
  S_cache, S_flushed, S_touched, S_wake, S_timed, S_settled = nil, nil, nil, nil, nil, nil
  S_claimed_all, S_ec_s, S_settling = nil, nil, nil
end

-- The writes queued for `flush`: field, value, ... (`S_nw` of them; what
-- lies past them is stale). One table for every operation, reset by
-- `load`.
local W = {}

-- Reads the counters plus the meta fields `extra` (a table or nil), or
-- the one field `one`, in one HMGET; returns the reply, whose values of
-- `extra` (or `one`) start at index `EXTRA` (12, or 10 after a `hot` load),
-- false for absent.
local EXTRA = 12

-- Grouping (batch scripts only, set by the batch loop): consecutive
-- appends and completions of one session share one `load` and one
-- `flush`. While `GROUP` is set, `put` also keeps what it queued in
-- `S_cache`, so the group's later operations read the records and ids
-- the earlier ones wrote, and `flush` only notes that it was called; the
-- batch loop writes once when the group ends (`flush_group`). `CONT` is
-- set for an operation that continues a group: its `load` reads only its
-- extra fields, and only those not written by the group.
local GROUP, CONT = false, false

-- Set by the batch loop for a group's first operation: the fields its
-- later operations will read (records of completed events, `#{id}` of
-- appended ones). The first `load` reads them with its own fields and
-- keeps them in `S_cache`.
local PREFETCH = nil

-- Sets the session state from the counters at the head of an HMGET
-- reply `v`. (A
-- constructor: setting sixteen fields of a kept table in place costs
-- more, and its cleared fields make the table rehash.)
local function counters(v, hot)
  local ec, pc, ac, cur = (v[1] or 0) + 0, (v[2] or 0) + 0, (v[3] or 0) + 0, (v[5] or 0) + 0
  -- Not read by a hot load: nil, which `flush` leaves alone.
  local fc, fl
  if not hot then fc, fl = (v[10] or 0) + 0, (v[11] or 0) + 0 end
  local ttl, xat, expired = nil, nil, false
  if v[9] then
    ttl, xat = parse_exp(v[9])
    local d = deadline_of(ttl, xat, v[4] and v[4] + 0 or 0)
    if has_expired(d, NOW) then
      -- EX3: gone, as after a clear; `reset_expired` deletes what is left.
      expired, ec, pc, ac, cur = true, 0, 0, 0, 0
      if not hot then fc, fl = 0, 0 end
    end
  end
  S_event_count, S_pending_count, S_failed_count, S_attempt_count = ec, pc, fc, ac
  S_failure_count, S_cursor, S_updated_at, S_in_pending = fl, cur, v[4] and v[4] + 0, v[6] == '1' and not expired
  S_followers = following(v[7])
  S_closed = v[8] and not expired and true or false
  S_ttl, S_xat, S_expired = ttl, xat, expired
  L_event_count, L_pending_count, L_failed_count, L_attempt_count = ec, pc, fc, ac
  L_failure_count, L_cursor, S_nw = fl, cur, 0
  S_cache = GROUP and {} or nil
  S_flushed, S_touched, S_wake, S_timed, S_settled = nil, nil, nil, nil, nil
  S_claimed_all, S_ec_s, S_settling = nil, nil, nil
end

-- What a continuing load of one field returns: its value at `EXTRA`. One
-- table for every such load, read by the caller before the next load.
local ONE = {}

local function load(extra, hot, one)
  if one then
    -- One extra field (a table of it costs as much as its lookups).
    if CONT then
      local cached = S_cache[one]
      if cached == nil then cached = redis.call('HGET', K_META, one) end
      ONE[EXTRA] = cached
      return ONE
    end
    if PREFETCH then
      extra = { one }
    else
      EXTRA = hot and 10 or 12
      local v
      if hot then
        v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
          'updated_at', 'cursor', 'in_pending', 'followers', 'closed', 'exp', one)
      else
        v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
          'updated_at', 'cursor', 'in_pending', 'followers', 'closed', 'exp', 'failed_count',
          'failure_count', one)
      end
      counters(v, hot)
      return v
    end
  end
  if CONT then
    local v, want, at = {}, nil, nil
    if extra then
      for k = 1, #extra do
        local cached = S_cache[extra[k]]
        if cached ~= nil then
          v[EXTRA + k - 1] = cached
        else
          -- Built only when the group's first load did not read ahead.
          if not want then want, at = {}, {} end
          want[#want + 1] = extra[k]
          at[#at + 1] = EXTRA + k - 1
        end
      end
      for from = 1, want and #want or 0, 1000 do
        local to = math.min(from + 999, #want)
        local got = redis.call('HMGET', K_META, unpack(want, from, to))
        for k = from, to do v[at[k]] = got[k - from + 1] end
      end
    end
    return v
  end
  local v
  local ahead = PREFETCH
  PREFETCH = nil
  if ahead then
    -- The group's later records ride on this HMGET: after `extra`.
    local all = {}
    local ne = extra and #extra or 0
    for k = 1, ne do all[k] = extra[k] end
    for k = 1, #ahead do all[ne + k] = ahead[k] end
    extra = all
  end
  EXTRA = hot and 10 or 12
  if not extra then
    v = redis.call('HMGET', K_META, unpack(SUM, 1, EXTRA - 1))
  elseif #extra <= 1000 then
    if hot then
      v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
        'updated_at', 'cursor', 'in_pending', 'followers', 'closed', 'exp', unpack(extra))
    else
      v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
        'updated_at', 'cursor', 'in_pending', 'followers', 'closed', 'exp', 'failed_count',
        'failure_count', unpack(extra))
    end
  else
    -- Huge batches: in chunks, within Lua's unpack limit.
    v = redis.call('HMGET', K_META, unpack(SUM, 1, EXTRA - 1))
    for from = 1, #extra, 1000 do
      local part = redis.call('HMGET', K_META, unpack(extra, from, math.min(from + 999, #extra)))
      for k = 1, #part do v[EXTRA + from + k - 2] = part[k] end
    end
  end
  counters(v, hot)
  if ahead then
    local first = EXTRA + #extra - #ahead
    for k = 1, #ahead do S_cache[ahead[k]] = v[first + k - 1] end
  end
  return v
end

-- A settling write's load outside a group (a completion): only the
-- counters it changes or checks (pending_count, updated_at) plus the field
-- `one`, at EXTRA (3). The others stay nil (`S_*`), which `flush` leaves
-- alone; a write that needs them loads again with `load`. `in_pending` is
-- not read: a session with pending work is in the pending set (`flush`
-- puts it there, and `pending_sessions.lua` drops only sessions without),
-- and settling never adds work.
local function load_settling(one)
  EXTRA = 4
  local v = redis.call('HMGET', K_META, 'pending_count', 'updated_at', 'exp', one)
  reset_state()
  local pc = (v[1] or 0) + 0
  S_pending_count, L_pending_count, S_updated_at = pc, pc, v[2] and v[2] + 0
  S_in_pending, S_nw, S_settling = true, 0, true
  if v[3] then
    S_ttl, S_xat = parse_exp(v[3])
    local d = deadline_of(S_ttl, S_xat, S_updated_at or 0)
    S_expired = has_expired(d, NOW)
  end
  return v
end

-- An operation's reply, for a script alone: appends and completions
-- return their common replies as values ('ok' and up to three texts, which
-- a batch joins into one string of its reply, see src/lua.rs), every other
-- reply as one value.
local function reply_of(r, r2, r3, r4)
  -- (A nil ends the reply: Redis reads an array up to its first nil.)
  if r == 'ok' and r2 ~= nil then return { r, r2, r3, r4 } end
  return r
end

-- The common record of a leased event, as claims write it: captures the
-- attempt's text and the position just after `lc`'s closing quote.
local COMMON_RECORD = '^{"a":(%d+),"fc":"%d+","lc":"%d+"(),"h":".-","x":"%d+"}$'

-- Records that appends wrote as a lane-less event's first lease, by their
-- text -> the text up to `lc`'s closing quote, which completing keeps: a
-- completion of attempt 1 that finds its record's text here skips the
-- match (a character-by-character walk of the whole record, 3% of a work
-- cycle) and the cut. The text alone decides the entry (so events claimed
-- by one holder in one millisecond share one), and the table starts over
-- after `LEASED_KEPT` texts, kept between calls: a completion that misses
-- (its text came earlier, or before this library state) matches as before.
local LEASED, LEASED_N, LEASED_KEPT = {}, 0, 256

-- The last record `first_lease` built, and what it was built from: the
-- operations of a batch mostly share their store time, and one holder's
-- leases their expiry, so consecutive appends reuse it instead of joining
-- nine strings into a new one each.
local FL_HOLDER, FL_EXPIRES, FL_NOW, FL_TEXT

-- The record of an event's first lease taken now, by `holder_json` (the
-- holder as JSON text) until `expires`, as appends and claims write it:
-- built as text (cjson would cost more than the rest of a claim).
local function first_lease(holder_json, expires)
  if holder_json == FL_HOLDER and expires == FL_EXPIRES and NOW_S == FL_NOW then
    return FL_TEXT
  end
  local text = '{"a":1,"fc":"' .. NOW_S .. '","lc":"' .. NOW_S .. '","h":' .. holder_json ..
    ',"x":"' .. expires .. '"}'
  FL_HOLDER, FL_EXPIRES, FL_NOW, FL_TEXT = holder_json, expires, NOW_S, text
  return text
end

-- Notes `text`, a record `first_lease` built, in `LEASED`: `lc`'s closing
-- quote is its 22 + 2 × #NOW_S-th character.
local function note_leased(text)
  if LEASED[text] == nil then
    if LEASED_N >= LEASED_KEPT then LEASED, LEASED_N = {}, 0 end
    LEASED[text], LEASED_N = string.sub(text, 1, 22 + 2 * #NOW_S), LEASED_N + 1
  end
end

-- What completing adds to a record when the attempt returned no events,
-- for attempt 1 at the store time `SETTLED_NOW` (kept between calls): the
-- completions of a batch share it.
local SETTLED_NOW, SETTLED_TAIL

local function settled_tail(at)
  if at == '1' and NOW_S == SETTLED_NOW then return SETTLED_TAIL end
  local tail = ',"p":"' .. NOW_S .. '","pa":' .. at .. ',"ret":"[]"}'
  if at == '1' then SETTLED_NOW, SETTLED_TAIL = NOW_S, tail end
  return tail
end

-- Texts of small counts, kept between calls (`TEXT[n] or text(n)`): a
-- session's pending and failed counts stay small, and `%d` costs a
-- `string.format` each time. Counts from 0 to 255 only.
local TEXT = {}
local function text(n)
  local t = fmt('%d', n)
  if n >= 0 and n < 256 then TEXT[n] = t end
  return t
end

-- Queues `field = value` for the HSET of `flush`.
local function put(field, value)
  local nw = S_nw
  W[nw + 1] = field
  W[nw + 2] = value
  S_nw = nw + 2
  if GROUP then S_cache[field] = value end
end

-- A record as stored (JSON text or false) -> a table.
local function decode(stored)
  if not stored then return {} end
  return cjson.decode(stored)
end

-- Queues record r of event i; returns its JSON text.
local function put_rec(i, r)
  local text = cjson.encode(r)
  put(i, text)
  return text
end

-- Records of several indexes in one HMGET: index string -> table.
local function recs(indexes)
  local out = {}
  for from = 1, #indexes, 1000 do
    local to = math.min(from + 999, #indexes)
    local v = redis.call('HMGET', K_META, unpack(indexes, from, to))
    for k = from, to do out[indexes[k]] = decode(v[k - from + 1]) end
  end
  if GROUP then
    for _, i in ipairs(indexes) do
      local cached = S_cache[i]
      if cached then out[i] = decode(cached) end
    end
  end
  return out
end

local function rec(i)
  if GROUP and S_cache[i] then return decode(S_cache[i]) end
  return decode(redis.call('HGET', K_META, i))
end

-- Writes what the script changed in one HSET: counters that moved, the
-- session's last write time (never moving back, even when the clock
-- does) when `touched`, and the queued records and ids. Keeps the
-- partition's sets: a session joins `K_SESSIONS` with its first event,
-- and joins `K_PENDING` (flag `in_pending`) when it gains pending work,
-- publishing its id on `WORK` each time its pending count rises from 0.
-- It leaves `K_PENDING` lazily: `pending_sessions.lua` drops sessions
-- whose count is 0, so a session that drains and refills does not churn
-- the set.
local refresh_expiry
local function flush(touched)
  if GROUP then
    S_flushed, S_touched = true, S_touched or touched
    return
  end
  -- The counters go straight into `W`, as `put` would queue them (a
  -- group has ended before its writes get here, so none goes to its
  -- cache): a call per field was a tenth of a write's interpreted work.
  local nw, w = S_nw, W
  -- The frontier's text, when `append_events` left it.
  local ec_s = S_ec_s
  if S_event_count ~= L_event_count then
    w[nw + 1] = 'event_count'
    w[nw + 2] = ec_s or fmt('%d', S_event_count)
    nw = nw + 2
  end
  if S_pending_count ~= L_pending_count then
    w[nw + 1] = 'pending_count'
    w[nw + 2] = TEXT[S_pending_count] or text(S_pending_count)
    nw = nw + 2
  end
  if S_failed_count ~= L_failed_count then
    w[nw + 1] = 'failed_count'
    w[nw + 2] = TEXT[S_failed_count] or text(S_failed_count)
    nw = nw + 2
  end
  if S_attempt_count ~= L_attempt_count then
    w[nw + 1] = 'attempt_count'
    w[nw + 2] = fmt('%d', S_attempt_count)
    nw = nw + 2
  end
  if S_failure_count ~= L_failure_count then
    w[nw + 1] = 'failure_count'
    w[nw + 2] = TEXT[S_failure_count] or text(S_failure_count)
    nw = nw + 2
  end
  if S_cursor ~= L_cursor then
    w[nw + 1] = 'cursor'
    w[nw + 2] = ec_s and S_cursor == S_event_count and ec_s or fmt('%d', S_cursor)
    nw = nw + 2
  end
  if touched and (not S_updated_at or S_updated_at < NOW) then
    w[nw + 1] = 'updated_at'
    w[nw + 2] = NOW_S
    nw = nw + 2
  end
  local joins = S_pending_count > 0 and not S_in_pending
  if joins then
    w[nw + 1] = 'in_pending'
    w[nw + 2] = '1'
    nw = nw + 2
  end
  if L_event_count == 0 and S_event_count > 0 then
    w[nw + 1] = 'first_event_at'
    w[nw + 2] = NOW_S
    nw = nw + 2
    redis.call('ZADD', key('sessions'), 0, SESSION)
  end
  S_nw = nw
  -- A huge operation's writes are not kept until the next one.
  if nw > 2000 then W = {} end
  if nw > 0 then
    if nw <= 1000 then
      redis.call('HSET', K_META, unpack(w, 1, nw))
    else
      for from = 1, nw, 1000 do
        redis.call('HSET', K_META, unpack(w, from, math.min(from + 999, nw)))
      end
    end
  end
  if joins then redis.call('ZADD', key('pending'), 0, SESSION) end
  -- AC5: work that its appender claimed whole is nobody else's.
  if S_pending_count > 0 and L_pending_count == 0 and not S_claimed_all then
    redis.call(PUBLISH, key('work'), SESSION)
  end
  -- EX1: activity moves a sliding deadline, and the keys' expiry with it.
  if touched and (S_ttl or S_xat) then refresh_expiry() end
end

-- EX5: how long after a session's deadline its keys expire on the
-- server (by the server's clock).
local GRACE = 1000

-- EX5: sets the server-side expiry of every key of the session to one
-- grace after its deadline, keeps the session in its partition's
-- `expiring` set at that time, and drops from the partition's sets a few
-- sessions whose keys have expired: their ids would stay there forever
-- otherwise. Several commands, but a constant number, per write of a
-- session that expires; nothing for one that does not.
refresh_expiry = function()
  local updated = S_updated_at
  if not updated or updated < NOW then updated = NOW end
  local at = deadline_of(S_ttl, S_xat, updated) + GRACE
  local px = at - NOW
  if px < 1 then px = 1 end
  px = fmt('%d', px)
  redis.call('PEXPIRE', K_LOG, px)
  redis.call('PEXPIRE', K_META, px)
  redis.call('PEXPIRE', K_TIMED, px)
  redis.call('PEXPIRE', key('ready'), px)
  redis.call('PEXPIRE', key('lanes'), px)
  redis.call('PEXPIRE', key('snapshots'), px)
  local expiring = key('expiring')
  redis.call('ZADD', expiring, fmt('%d', at), SESSION)
  local gone = redis.call('ZRANGEBYSCORE', expiring, '-inf', NOW_S, 'LIMIT', 0, 8)
  for _, id in ipairs(gone) do
    redis.call('ZREM', key('sessions'), id)
    redis.call('ZREM', key('pending'), id)
    redis.call('ZREM', expiring, id)
  end
end

-- EX1: a write that moves `updated_at` itself (close, trim) moves a
-- sliding deadline too, and the keys' expiry with it. `exp` is the
-- session's `exp` field (nil: it does not expire).
local function touch_expiry(exp)
  if not exp then return end
  S_ttl, S_xat = parse_exp(exp)
  S_updated_at = nil
  refresh_expiry()
end

-- EX2: gives the session the expiry `spec` (`{ttl}|{expires_at}`, both
-- parts empty for none), written by the next `flush`, which sets the
-- keys' expiry when it is touched.
local function set_exp(spec)
  local ttl, at = parse_exp(spec)
  S_ttl, S_xat = ttl, at
  if ttl or at then
    put('exp', spec)
  else
    redis.call('HDEL', K_META, 'exp')
    redis.call('ZREM', key('expiring'), SESSION)
    for _, k in ipairs({ K_LOG, K_META, K_TIMED, key('ready'), key('lanes'), key('snapshots') }) do
      redis.call('PERSIST', k)
    end
  end
end

-- EX3: deletes what is left of an expired session before it starts anew
-- (its keys may not have expired on the server yet), keeping the count of
-- feeds that follow it, as `clear.lua` does.
local function reset_expired()
  local followers = redis.call('HGET', K_META, 'followers')
  redis.call('DEL', K_LOG, K_META, key('ready'), K_TIMED, key('lanes'), key('snapshots'))
  if followers then redis.call('HSET', K_META, 'followers', followers) end
  redis.call('ZREM', key('expiring'), SESSION)
  S_expired, S_ttl, S_xat = false, nil, nil
  if S_cache then S_cache = {} end
end

-- The most bytes of events one wake-up carries (`RedisOptions::
-- wake_carry_cap`), set by the batch loop: a group joins the wake-ups of
-- its writes up to it. 0 (a script alone) joins none.
local WAKE_CAP = 0

-- Publishes a wake-up for events up to `last` (the frontier's text, ST2):
-- `{"f":frontier,"t":created_at,"e":[...]}` carrying `events` (their JSON
-- array), or `{"f":frontier}` when they are not carried (nil). Only while
-- a live feed follows the session (`followers`, read by `load`): a feed
-- counts itself there before its first read, so whatever it does not read
-- is published. A wake-up nobody hears was a tenth of an append's cost.
local function send_wake(last, t, events)
  if not S_followers then return end
  if events then
    redis.call(PUBLISH, events_channel(), '{"f":' .. last .. ',"t":' .. t .. ',"e":' .. events .. '}')
  else
    redis.call(PUBLISH, events_channel(), '{"f":' .. last .. '}')
  end
end

-- Sends the wake-up a group holds back, if any: its writes' arrays of
-- events (`parts`) joined into one.
local function send_held_wake()
  local w = S_wake
  if not w then return end
  S_wake = nil
  local parts, events = w.parts, nil
  if parts then
    events = parts[1]
    if #parts > 1 then
      local inner = {}
      for k = 1, #parts do inner[k] = string.sub(parts[k], 2, -2) end
      events = '[' .. table.concat(inner, ',') .. ']'
    end
  end
  send_wake(w.f, w.t, events)
end

-- The wake-up of a write that appended events up to `last` (text), carrying
-- `events_json` (their JSON array, or '' when over the cap). In a group
-- it is held back, and joined by the next write's when both carry their
-- events, share a store time and stay within `WAKE_CAP` together: one
-- `PUBLISH` for a run of one session's writes, as for one batch of
-- events. Subscribers see the same frontiers and events either way.
local function publish_wake(last, events_json)
  -- Nobody to hear it: nothing to hold or join (`send_wake` would drop it).
  if not S_followers then return end
  if not GROUP then
    send_wake(last, NOW_S, events_json ~= '' and events_json or nil)
    return
  end
  local w = S_wake
  if w and w.parts and events_json ~= '' and w.t == NOW_S and w.size + #events_json <= WAKE_CAP then
    w.parts[#w.parts + 1] = events_json
    w.size = w.size + #events_json
    w.f = last
    return
  end
  send_held_wake()
  S_wake = { f = last, t = NOW_S, parts = events_json ~= '' and { events_json } or nil,
    size = #events_json }
end

-- Adds the leases a group's appends held back (`S_timed`: expiry,
-- index, ...) to `timed`, in one `ZADD`. Runs before anything else of
-- the group reads or changes `timed` or `ready`.
local function send_held_timed()
  local held = S_timed
  if not held then return end
  S_timed = nil
  for from = 1, #held, 1000 do
    redis.call('ZADD', K_TIMED, unpack(held, from, math.min(from + 999, #held)))
  end
end

-- Ends a group: writes what its operations changed, once, adds the
-- leases its appends took (`S_timed`), and takes the events its
-- completions settled out of the queues in one `ZREM` (`S_settled`; an
-- event is in `timed` or `ready`, or in neither); then publishes the
-- wake-up it held back.
local function flush_group()
  GROUP, CONT = false, false
  send_held_timed()
  local settled = S_settled
  if settled then
    if redis.call('ZREM', K_TIMED, unpack(settled)) < #settled then
      redis.call('ZREM', key('ready'), unpack(settled))
    end
  end
  if S_flushed then flush(S_touched) end
  send_held_wake()
end

-- Runs `cmd key args...` over a flat list in chunks of at most `step`
-- arguments, so a large batch stays within Lua's unpack limit.
local function bulk(cmd, key, args, step)
  local total = #args
  if total == 0 then return end
  for from = 1, total, step do
    redis.call(cmd, key, unpack(args, from, math.min(from + step - 1, total)))
  end
end

-- A lane member sorts by lane, then by index (zero-padded).
local function lane_member(lane, i)
  return lane .. ':' .. string.format('%020d', tonumber(i))
end

-- The first unprocessed event of a lane (processed ones leave the set),
-- or nil.
local function lane_head(lane)
  local first = redis.call('ZRANGEBYLEX', key('lanes'), '[' .. lane .. ':', '[' .. lane .. ';', 'LIMIT', 0, 1)
  if #first == 0 then return nil end
  return tostring(tonumber(string.sub(first[1], #lane + 2)))
end

-- Puts claimed-before event i (a string) where its record r says it
-- belongs (section 1 of the contract): nowhere when it is processed, dead
-- or waiting behind its lane head; in `timed` at its lease expiry or
-- retry time; else in `ready`.
local function reslot(i, r)
  send_held_timed()
  redis.call('ZREM', key('ready'), i)
  redis.call('ZREM', K_TIMED, i)
  if r.p or r.d then return end
  if r.l and lane_head(r.l) ~= i then return end
  if r.h and r.x then
    redis.call('ZADD', K_TIMED, r.x, i)
  elseif r.r then
    redis.call('ZADD', K_TIMED, r.r, i)
  else
    redis.call('ZADD', key('ready'), i, i)
  end
end

-- Event i (a string, record r) is processed: it leaves the queues, and
-- the next event of its lane becomes ready unless it is dead-lettered (a
-- dead head blocks). The caller counts it out of `pending_count`.
local function settle(i, r)
  send_held_timed()
  if redis.call('ZREM', K_TIMED, i) == 0 then redis.call('ZREM', key('ready'), i) end
  if not r.l then return end
  redis.call('ZREM', key('lanes'), lane_member(r.l, i))
  local head = lane_head(r.l)
  if head then reslot(head, rec(head)) end
end

-- One row for the client: { entry id, { field, value, ... }, record JSON
-- or false }.
local function rows_of(entries)
  local indexes = {}
  for k, entry in ipairs(entries) do indexes[k] = string.match(entry[1], '^(%d+)') end
  local out = {}
  for from = 1, #entries, 1000 do
    local to = math.min(from + 999, #entries)
    local v = redis.call('HMGET', K_META, unpack(indexes, from, to))
    for k = from, to do
      local record = v[k - from + 1]
      if GROUP and S_cache[indexes[k]] then record = S_cache[indexes[k]] end
      out[k] = { entries[k][1], entries[k][2], record }
    end
  end
  return out
end

local function entry_of(i)
  return redis.call('XRANGE', K_LOG, i .. '-0', i .. '-0')[1]
end

-- CN4, RV1, TR3, E1: the event a call names by its index `si` (text):
-- its log entry, its record (a table) and its record as stored (JSON
-- text or false); or nil and the refusal every such call answers —
-- {'invalid'} for an index outside 1..frontier, {'trimmed', first index},
-- {'corrupted'} when its log entry is missing (`ops::event_reply`).
local function event_at(si)
  local got = load({ si })
  local i = tonumber(si)
  if i < 1 or i > S_event_count then return nil, { 'invalid' } end
  local stored = got[EXTRA]
  if not stored then
    local first = tonumber(redis.call('HGET', K_META, 'first') or '1')
    if i < first then return nil, { 'trimmed', first } end
  end
  local entry = entry_of(si)
  if not entry then return nil, { 'corrupted' } end
  return entry, decode(stored), stored
end

-- An event's extras argument (`EVENT_STRIDE` in src/lua.rs): '' for an
-- event without lane, cause, settled flag or due time, else
-- `{1|0}|{due}|{cause}|{encoded lane}|{lane}`. Returns settled (a
-- boolean), the cause `{index}:{attempt}` or '', the encoded lane and the
-- lane ('' for none), and the due time (DL1; '' for none).
local function extras(e)
  if e == '' then return false, '', '', '', '' end
  local d = string.find(e, '|', 3, true)
  local c = string.find(e, '|', d + 1, true)
  local l = string.find(e, '|', c + 1, true)
  return string.byte(e, 1) == 49, string.sub(e, d + 1, c - 1), string.sub(e, c + 1, l - 1),
    string.sub(e, l + 1), string.sub(e, 3, d - 1)
end

-- Appends n events whose EVENT_STRIDE arguments each start at argv[at]:
-- id, type, payload json, extras (see `extras`). `hids` holds their
-- `#{id}` fields when the caller built them (`hid1` the one of a single
-- event). Lane-less pending events need no
-- queue entry: they lie past the claim cursor, where `claim.lua` finds
-- them in the log. Lane events join their lane, and the ready set when
-- they head it.
--
-- With a `limit` above 0 (a number; `holder` the JSON text of the holder,
-- `expires` text), the appended events that are ready at once are leased as a
-- claim leases them (AC2), up to the limit: their record says so and they
-- go to `timed` at the expiry instead of `ready`. The cursor then passes
-- every new event that has a record, up to the first that has none.
-- Returns the claimed indexes (strings, ascending); counts go into `S_*`,
-- and the new frontier's text into `S_ec_s` (for `flush` and the wake-up,
-- which would format it again).
local NONE = {}
-- What a one-event append alone returns when it claims its event: only
-- ever holds index 1.
local ONE_CLAIMED = {}

local function append_events(argv, n, at, limit, holder, expires, hids, hid1)
  local base = S_event_count
  -- Built on first use: most appends need none of them.
  local lanes, ready, timed, claimed, nc, last = nil, nil, nil, nil, 0, nil
  limit = limit or 0
  -- The record of a lane-less event leased here (a lane's adds `"l"`).
  local leased = nil
  if limit > 0 then leased = first_lease(holder, expires) end
  -- The cursor may pass the new events while each has a record.
  local passing = S_cursor == base
  -- lane -> true once the lane has an unprocessed event before this one
  local lane_busy = nil
  -- DL1: delayed events that would be ready wait in `timed` until due; a
  -- delayed lane head keeps its lane busy like any head (DL2).
  local delayed = nil
  for k = 1, n do
    local o = at + (k - 1) * EVENT_STRIDE
    local id, e = argv[o], argv[o + 3]
    local i = fmt('%d', base + k)
    local settled, cause, lane_enc, lane, due = false, '', '', '', ''
    if e == '' then
      -- The common event: no table to build and unpack. (An entry id
      -- without its sequence part means `{i}-0`.)
      redis.call('XADD', K_LOG, i, 'id', id, 'type', argv[o + 1], 'payload', argv[o + 2],
        'created_at', NOW_S)
    else
      settled, cause, lane_enc, lane, due = extras(e)
      local fields = { 'id', id, 'type', argv[o + 1], 'payload', argv[o + 2], 'created_at', NOW_S }
      if lane ~= '' then
        fields[#fields + 1] = 'lane'
        fields[#fields + 1] = lane
      end
      if cause ~= '' then
        fields[#fields + 1] = 'cause'
        fields[#fields + 1] = cause
      end
      if settled then
        fields[#fields + 1] = 'settled'
        fields[#fields + 1] = '1'
      end
      redis.call('XADD', K_LOG, i, unpack(fields))
    end
    put(hids and hids[k] or hid1 or '#' .. id, i)
    local recorded = true
    if settled then
      put(i, '{"p":"' .. NOW_S .. '"}')
    else
      S_pending_count = S_pending_count + 1
      -- A delayed event is never claimed at append (AC2, DL3).
      local take = nc < limit and due == ''
      if lane_enc ~= '' then
        lanes = lanes or {}
        lane_busy = lane_busy or {}
        lanes[#lanes + 1] = 0
        lanes[#lanes + 1] = lane_member(lane_enc, i)
        local busy = lane_busy[lane_enc]
        if busy == nil then busy = lane_head(lane_enc) ~= nil end
        if busy or not take then
          if due == '' then
            put(i, cjson.encode({ l = lane_enc }))
          else
            put(i, cjson.encode({ l = lane_enc, r = due }))
          end
          if busy then
          elseif due ~= '' then
            delayed = delayed or {}
            delayed[#delayed + 1] = due
            delayed[#delayed + 1] = i
          else
            ready = ready or {}
            ready[#ready + 1] = i
            ready[#ready + 1] = i
          end
        else
          put(i, '{"l":' .. cjson.encode(lane_enc) .. ',' .. string.sub(leased, 2))
          nc = nc + 1
          if claimed then
            claimed[nc] = i
            timed[2 * nc - 1] = expires
            timed[2 * nc] = i
          else
            claimed, timed = { i }, { expires, i }
          end
        end
        lane_busy[lane_enc] = true
      elseif due ~= '' then
        put(i, '{"r":"' .. due .. '"}')
        delayed = delayed or {}
        delayed[#delayed + 1] = due
        delayed[#delayed + 1] = i
      elseif take then
        put(i, leased)
        if nc == 0 then note_leased(leased) end
        nc = nc + 1
        if n == 1 and not GROUP then
          -- One event alone: its lease goes to `timed` now, and no table
          -- is built for it.
          ONE_CLAIMED[1] = i
          claimed = ONE_CLAIMED
          redis.call('ZADD', K_TIMED, expires, i)
        -- Built at the first: a constructor sizes the table once.
        elseif claimed then
          claimed[nc] = i
          timed[2 * nc - 1] = expires
          timed[2 * nc] = i
        else
          claimed, timed = { i }, { expires, i }
        end
      else
        recorded = false
      end
    end
    passing = passing and recorded
    if passing then S_cursor = base + k end
    last = i
  end
  S_event_count = base + n
  S_ec_s = last
  S_attempt_count = S_attempt_count + nc
  if lanes then bulk('ZADD', key('lanes'), lanes, 1000) end
  if ready then bulk('ZADD', key('ready'), ready, 1000) end
  if delayed then bulk('ZADD', K_TIMED, delayed, 1000) end
  if timed then
    if GROUP then
      -- The group adds its leases at once when it ends.
      local held = S_timed
      if held then
        for k = 1, #timed do held[#held + 1] = timed[k] end
      else
        S_timed = timed
      end
    else
      bulk('ZADD', K_TIMED, timed, 1000)
    end
  end
  return claimed or NONE
end

-- FK6: the prefix of the hidden keys of a fork being built in this
-- session's partition, `P:{T}::fork:{token}:`: an empty encoded id, which
-- no session has, so they never name a session's keys.
local function fork_stage(token)
  return string.sub(key('sessions'), 1, -9) .. ':fork:' .. token .. ':'
end
