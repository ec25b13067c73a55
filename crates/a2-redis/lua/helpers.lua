-- Shared helpers, run inside every session script after the prelude that
-- src/lua.rs generates (the K_* key names, SESSION, NOW and NOW_S (its
-- text), EVENTS, WORK, EVENT_STRIDE, all set by `enter`), so each script
-- is one atomic unit with them. Helpers never read ARGV or KEYS: a batch
-- script runs several operations, each with its own.
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
-- reads the first six.
local SUM = { 'event_count', 'pending_count', 'attempt_count', 'updated_at', 'cursor',
  'in_pending', 'failed_count', 'failure_count' }

-- The session's state for this script: counters as loaded (numbers;
-- `S[1..6]` keep the loaded ones for `flush`) and the number of writes
-- queued for the one HSET of `flush` (`nw`, in `W`). Costs matter here:
-- every write runs `load` and `flush`, so they build no tables they can
-- avoid (a table costs as much as a dozen field reads: it is allocated,
-- grown and collected) and convert each counter from text once (`+ 0`,
-- one `strtod`, where `tonumber` costs two and a call).
local S = {}

-- The writes queued for `flush`: field, value, ... (`S.nw` of them; what
-- lies past them is stale). One table for every operation, reset by
-- `load`.
local W = {}

-- Reads the counters plus the meta fields `extra` (a table or nil), or
-- the one field `one`, in one HMGET; returns the reply, whose values of
-- `extra` (or `one`) start at index `EXTRA` (9, or 7 after a `hot` load),
-- false for absent.
local EXTRA = 9

-- Grouping (batch scripts only, set by the batch loop): consecutive
-- appends and completions of one session share one `load` and one
-- `flush`. While `GROUP` is set, `put` also keeps what it queued in
-- `S.cache`, so the group's later operations read the records and ids
-- the earlier ones wrote, and `flush` only notes that it was called; the
-- batch loop writes once when the group ends (`flush_group`). `CONT` is
-- set for an operation that continues a group: its `load` reads only its
-- extra fields, and only those not written by the group.
local GROUP, CONT = false, false

-- Set by the batch loop for a group's first operation: the fields its
-- later operations will read (records of completed events, `#{id}` of
-- appended ones). The first `load` reads them with its own fields and
-- keeps them in `S.cache`.
local PREFETCH = nil

-- Sets `S` from the counters at the head of an HMGET reply `v`.
local function counters(v, hot)
  local ec, pc, ac, cur = (v[1] or 0) + 0, (v[2] or 0) + 0, (v[3] or 0) + 0, (v[5] or 0) + 0
  -- Not read by a hot load: nil, which `flush` leaves alone.
  local fc, fl
  if not hot then fc, fl = (v[7] or 0) + 0, (v[8] or 0) + 0 end
  S = { ec, pc, fc, ac, fl, cur, event_count = ec, pending_count = pc, failed_count = fc,
    attempt_count = ac, failure_count = fl, cursor = cur, updated_at = v[4] and v[4] + 0,
    in_pending = v[6] == '1', nw = 0, cache = GROUP and {} or nil }
end

-- What a continuing load of one field returns: its value at `EXTRA`. One
-- table for every such load, read by the caller before the next load.
local ONE = {}

local function load(extra, hot, one)
  if one then
    -- One extra field (a table of it costs as much as its lookups).
    if CONT then
      local cached = S.cache[one]
      if cached == nil then cached = redis.call('HGET', K_META, one) end
      ONE[EXTRA] = cached
      return ONE
    end
    if PREFETCH then
      extra = { one }
    else
      EXTRA = hot and 7 or 9
      local v
      if hot then
        v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
          'updated_at', 'cursor', 'in_pending', one)
      else
        v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
          'updated_at', 'cursor', 'in_pending', 'failed_count', 'failure_count', one)
      end
      counters(v, hot)
      return v
    end
  end
  if CONT then
    local v, want, at = {}, nil, nil
    if extra then
      for k = 1, #extra do
        local cached = S.cache[extra[k]]
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
  EXTRA = hot and 7 or 9
  if not extra then
    v = redis.call('HMGET', K_META, unpack(SUM, 1, EXTRA - 1))
  elseif #extra <= 1000 then
    if hot then
      v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
        'updated_at', 'cursor', 'in_pending', unpack(extra))
    else
      v = redis.call('HMGET', K_META, 'event_count', 'pending_count', 'attempt_count',
        'updated_at', 'cursor', 'in_pending', 'failed_count', 'failure_count', unpack(extra))
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
    for k = 1, #ahead do S.cache[ahead[k]] = v[first + k - 1] end
  end
  return v
end

-- Queues `field = value` for the HSET of `flush`.
local function put(field, value)
  local nw = S.nw
  W[nw + 1] = field
  W[nw + 2] = value
  S.nw = nw + 2
  if GROUP then S.cache[field] = value end
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
      local cached = S.cache[i]
      if cached then out[i] = decode(cached) end
    end
  end
  return out
end

local function rec(i)
  if GROUP and S.cache[i] then return decode(S.cache[i]) end
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
local function flush(touched)
  if GROUP then
    S.flushed, S.touched = true, S.touched or touched
    return
  end
  local L = S
  if S.event_count ~= L[1] then put('event_count', fmt('%d', S.event_count)) end
  if S.pending_count ~= L[2] then put('pending_count', fmt('%d', S.pending_count)) end
  if S.failed_count ~= L[3] then put('failed_count', fmt('%d', S.failed_count)) end
  if S.attempt_count ~= L[4] then put('attempt_count', fmt('%d', S.attempt_count)) end
  if S.failure_count ~= L[5] then put('failure_count', fmt('%d', S.failure_count)) end
  if S.cursor ~= L[6] then put('cursor', fmt('%d', S.cursor)) end
  if touched and (not S.updated_at or S.updated_at < NOW) then put('updated_at', NOW_S) end
  local joins = S.pending_count > 0 and not S.in_pending
  if joins then put('in_pending', '1') end
  if L[1] == 0 and S.event_count > 0 then
    put('first_event_at', NOW_S)
    redis.call('ZADD', key('sessions'), 0, SESSION)
  end
  local nw, w = S.nw, W
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
  if S.pending_count > 0 and L[2] == 0 and not S.claimed_all then
    redis.call(PUBLISH, key('work'), SESSION)
  end
end

-- The most bytes of events one wake-up carries (`RedisOptions::
-- wake_carry_cap`), set by the batch loop: a group joins the wake-ups of
-- its writes up to it. 0 (a script alone) joins none.
local WAKE_CAP = 0

-- Publishes a wake-up for events up to `last` (ST2):
-- `{"f":frontier,"t":created_at,"e":[...]}` carrying `events` (their JSON
-- array), or `{"f":frontier}` when they are not carried (nil).
local function send_wake(last, t, events)
  if events then
    redis.call(PUBLISH, EVENTS, '{"f":' .. fmt('%d', last) .. ',"t":' .. t .. ',"e":' .. events .. '}')
  else
    redis.call(PUBLISH, EVENTS, '{"f":' .. fmt('%d', last) .. '}')
  end
end

-- Sends the wake-up a group holds back, if any: its writes' arrays of
-- events (`parts`) joined into one.
local function send_held_wake()
  local w = S.wake
  if not w then return end
  S.wake = nil
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

-- The wake-up of a write that appended events up to `last`, carrying
-- `events_json` (their JSON array, or '' when over the cap). In a group
-- it is held back, and joined by the next write's when both carry their
-- events, share a store time and stay within `WAKE_CAP` together: one
-- `PUBLISH` for a run of one session's writes, as for one batch of
-- events. Subscribers see the same frontiers and events either way.
local function publish_wake(last, events_json)
  if not GROUP then
    send_wake(last, NOW_S, events_json ~= '' and events_json or nil)
    return
  end
  local w = S.wake
  if w and w.parts and events_json ~= '' and w.t == NOW_S and w.size + #events_json <= WAKE_CAP then
    w.parts[#w.parts + 1] = events_json
    w.size = w.size + #events_json
    w.f = last
    return
  end
  send_held_wake()
  S.wake = { f = last, t = NOW_S, parts = events_json ~= '' and { events_json } or nil,
    size = #events_json }
end

-- Adds the leases a group's appends held back (`S.timed`: expiry,
-- index, ...) to `timed`, in one `ZADD`. Runs before anything else of
-- the group reads or changes `timed` or `ready`.
local function send_held_timed()
  local held = S.timed
  if not held then return end
  S.timed = nil
  for from = 1, #held, 1000 do
    redis.call('ZADD', K_TIMED, unpack(held, from, math.min(from + 999, #held)))
  end
end

-- Ends a group: writes what its operations changed, once, adds the
-- leases its appends took (`S.timed`), and takes the events its
-- completions settled out of the queues in one `ZREM` (`S.settled`; an
-- event is in `timed` or `ready`, or in neither); then publishes the
-- wake-up it held back.
local function flush_group()
  GROUP, CONT = false, false
  send_held_timed()
  local settled = S.settled
  if settled then
    if redis.call('ZREM', K_TIMED, unpack(settled)) < #settled then
      redis.call('ZREM', K_READY, unpack(settled))
    end
  end
  if S.flushed then flush(S.touched) end
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
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  if r.p or r.d then return end
  if r.l and lane_head(r.l) ~= i then return end
  if r.h and r.x then
    redis.call('ZADD', K_TIMED, r.x, i)
  elseif r.r then
    redis.call('ZADD', K_TIMED, r.r, i)
  else
    redis.call('ZADD', K_READY, i, i)
  end
end

-- Event i (a string, record r) is processed: it leaves the queues, and
-- the next event of its lane becomes ready unless it is dead-lettered (a
-- dead head blocks). The caller counts it out of `pending_count`.
local function settle(i, r)
  send_held_timed()
  if redis.call('ZREM', K_TIMED, i) == 0 then redis.call('ZREM', K_READY, i) end
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
      if GROUP and S.cache[indexes[k]] then record = S.cache[indexes[k]] end
      out[k] = { entries[k][1], entries[k][2], record }
    end
  end
  return out
end

local function entry_of(i)
  return redis.call('XRANGE', K_LOG, i .. '-0', i .. '-0')[1]
end

-- An event's extras argument (`EVENT_STRIDE` in src/lua.rs): '' for an
-- event without lane, cause or settled flag, else
-- `{1|0}|{cause}|{encoded lane}|{lane}`. Returns settled (a boolean), the
-- cause `{index}:{attempt}` or '', the encoded lane and the lane ('' for
-- none).
local function extras(e)
  if e == '' then return false, '', '', '' end
  local c = string.find(e, '|', 3, true)
  local l = string.find(e, '|', c + 1, true)
  return string.byte(e, 1) == 49, string.sub(e, 3, c - 1), string.sub(e, c + 1, l - 1),
    string.sub(e, l + 1)
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
-- Returns the claimed indexes (strings, ascending); counts go into S.
local NONE = {}

local function append_events(argv, n, at, limit, holder, expires, hids, hid1)
  local base = S.event_count
  -- Built on first use: most appends need none of them.
  local lanes, ready, timed, claimed, nc = nil, nil, nil, nil, 0
  limit = limit or 0
  local leased = nil
  if limit > 0 then
    leased = '"a":1,"fc":"' .. NOW_S .. '","lc":"' .. NOW_S .. '","h":' .. holder ..
      ',"x":"' .. expires .. '"}'
  end
  -- The cursor may pass the new events while each has a record.
  local passing = S.cursor == base
  -- lane -> true once the lane has an unprocessed event before this one
  local lane_busy = nil
  for k = 1, n do
    local o = at + (k - 1) * EVENT_STRIDE
    local id, e = argv[o], argv[o + 3]
    local i = fmt('%d', base + k)
    local settled, cause, lane_enc, lane = false, '', '', ''
    if e == '' then
      -- The common event: no table to build and unpack. (An entry id
      -- without its sequence part means `{i}-0`.)
      redis.call('XADD', K_LOG, i, 'id', id, 'type', argv[o + 1], 'payload', argv[o + 2],
        'created_at', NOW_S)
    else
      settled, cause, lane_enc, lane = extras(e)
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
      S.pending_count = S.pending_count + 1
      local take = nc < limit
      if take and not claimed then claimed, timed = {}, {} end
      if lane_enc ~= '' then
        lanes = lanes or {}
        lane_busy = lane_busy or {}
        lanes[#lanes + 1] = 0
        lanes[#lanes + 1] = lane_member(lane_enc, i)
        local busy = lane_busy[lane_enc]
        if busy == nil then busy = lane_head(lane_enc) ~= nil end
        if busy or not take then
          put(i, cjson.encode({ l = lane_enc }))
          if not busy then
            ready = ready or {}
            ready[#ready + 1] = i
            ready[#ready + 1] = i
          end
        else
          put(i, '{"l":' .. cjson.encode(lane_enc) .. ',' .. leased)
          nc = nc + 1
          claimed[nc] = i
          timed[2 * nc - 1] = expires
          timed[2 * nc] = i
        end
        lane_busy[lane_enc] = true
      elseif take then
        put(i, '{' .. leased)
        nc = nc + 1
        claimed[nc] = i
        timed[2 * nc - 1] = expires
        timed[2 * nc] = i
      else
        recorded = false
      end
    end
    passing = passing and recorded
    if passing then S.cursor = base + k end
  end
  S.event_count = base + n
  S.attempt_count = S.attempt_count + nc
  if lanes then bulk('ZADD', key('lanes'), lanes, 1000) end
  if ready then bulk('ZADD', K_READY, ready, 1000) end
  if timed then
    if GROUP then
      -- The group adds its leases at once when it ends.
      local held = S.timed
      if held then
        for k = 1, #timed do held[#held + 1] = timed[k] end
      else
        S.timed = timed
      end
    else
      bulk('ZADD', K_TIMED, timed, 1000)
    end
  end
  return claimed or NONE
end
