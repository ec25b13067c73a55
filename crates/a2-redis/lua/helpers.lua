-- Shared helpers, prepended to every session script at build time
-- (src/scripts.rs), so each script below is one atomic unit with them.
--
-- Every session script gets the same keys and leading arguments:
-- KEYS[1]: log       stream, one entry `{index}-0` per event (RD2)
-- KEYS[2]: rec       hash, processing records: field `{index}:{attr}`
-- KEYS[3]: sum       hash, the session's summary counters (I1)
-- KEYS[4]: pending   sorted set of pending indexes (score = index)
-- KEYS[5]: ready     sorted set of ready indexes claimable at once
--                    (score = index): pending, let run by their lane, with
--                    no live lease or retry time
-- KEYS[6]: lanes     sorted set (scores 0) of `{lane}:{index:020}` per
--                    unprocessed lane event, so a lane's head is its first
-- KEYS[7]: ids       hash, event id -> index (ids are unique per session, A4)
-- KEYS[8]: sessions  store-wide sorted set (scores 0) of listed sessions
-- KEYS[9]: pending-sessions  store-wide sorted set (scores 0)
-- KEYS[10]: snapshots hash, reducer -> `{index}|{updated_at}|{state json}`
-- KEYS[11]: presence hash, `{participant}:{field}` (encoded) ->
--                    `{at}|{expires_at}|{entry json}`
-- KEYS[12]: timed    sorted set of ready indexes claimable from a time
--                    (score = lease expiry or retry time)
-- ARGV[1]: session id
-- ARGV[2]: now, store clock in ms (scripts never read the server's TIME)
-- ARGV[3]: the session's events channel
local K_LOG, K_REC, K_SUM, K_PENDING, K_READY, K_LANES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_IDS, K_SESSIONS, K_PENDING_SESSIONS = KEYS[7], KEYS[8], KEYS[9]
local K_SNAPSHOTS, K_PRESENCE, K_TIMED = KEYS[10], KEYS[11], KEYS[12]
local SESSION, NOW, CHANNEL = ARGV[1], tonumber(ARGV[2]), ARGV[3]

-- Processing record attributes returned with each row, in this order
-- (src/codec.rs decodes them by position).
local ROW_ATTRS = { 'a', 'fc', 'lc', 'h', 'x', 'r', 'n', 'lf', 'la', 'e', 'd', 'p', 'pa', 'ret' }

-- A record field. Pass the index as a string where one is at hand: Lua
-- formats numbers with sprintf, which is slow enough to show in profiles.
local function rf(i, attr)
  return i .. ':' .. attr
end

local function rget(i, attr)
  return redis.call('HGET', K_REC, rf(i, attr))
end

local function rnum(i, attr)
  return tonumber(redis.call('HGET', K_REC, rf(i, attr)) or '0')
end

-- Record attributes read by `rec`: the row's, then the lane.
local REC_ATTRS = { 'a', 'fc', 'lc', 'h', 'x', 'r', 'n', 'lf', 'la', 'e', 'd', 'p', 'pa', 'ret', 'l' }

-- Event i's whole processing record in one HMGET: attr -> value or false.
local function rec(i)
  local fields = {}
  for n, attr in ipairs(REC_ATTRS) do fields[n] = rf(i, attr) end
  local values = redis.call('HMGET', K_REC, unpack(fields))
  local r = {}
  for n, attr in ipairs(REC_ATTRS) do r[attr] = values[n] end
  return r
end

-- Runs `cmd key args...` over a flat list of arguments in chunks of at
-- most `step` (a multiple of the arguments per item), so a large batch
-- stays within Lua's unpack limit.
local function bulk(cmd, key, args, step)
  local total = #args
  if total == 0 then return end
  if total <= step then
    redis.call(cmd, key, unpack(args))
    return
  end
  for from = 1, total, step do
    local to = math.min(from + step - 1, total)
    redis.call(cmd, key, unpack(args, from, to))
  end
end

-- The summary counters scripts read and write, in one HMGET.
local SUM_ATTRS = { 'event_count', 'pending_count', 'updated_at', 'attempt_count' }

local function summary()
  local values = redis.call('HMGET', K_SUM, unpack(SUM_ATTRS))
  return {
    event_count = tonumber(values[1] or '0'),
    pending_count = tonumber(values[2] or '0'),
    updated_at = tonumber(values[3] or ''),
    attempt_count = tonumber(values[4] or '0'),
  }
end

local function frontier()
  return tonumber(redis.call('HGET', K_SUM, 'event_count') or '0')
end

-- The row values of record r, in ROW_ATTRS order (false for absent).
local function row_values(r)
  local values = {}
  for n, attr in ipairs(ROW_ATTRS) do values[n] = r[attr] or false end
  return values
end

-- One row: { entry id, { field, value, ... }, { record attrs in ROW_ATTRS order } }.
local function row_of(entry)
  local i = string.match(entry[1], '^(%d+)')
  local fields = {}
  for n, attr in ipairs(ROW_ATTRS) do fields[n] = rf(i, attr) end
  return { entry[1], entry[2], redis.call('HMGET', K_REC, unpack(fields)) }
end

local function log_entry(i)
  return redis.call('XRANGE', K_LOG, i .. '-0', i .. '-0')[1]
end

local function row(i)
  return row_of(log_entry(i))
end

-- A lane member sorts by lane, then by index (zero-padded).
local function lane_member(lane, i)
  return lane .. ':' .. string.format('%020d', i)
end

-- The first unprocessed event of a lane (processed ones leave the set),
-- or nil.
local function lane_head(lane)
  local first = redis.call('ZRANGEBYLEX', K_LANES, '[' .. lane .. ':', '[' .. lane .. ';', 'LIMIT', 0, 1)
  if #first == 0 then return nil end
  return tonumber(string.sub(first[1], #lane + 2))
end

-- Puts event i where its own fields say it belongs (section 1): nowhere
-- when it is settled, dead or waiting behind its lane head; in `timed` at
-- its lease expiry or retry time; else in `ready`. `r` is its record as
-- `rec` reads it, or nil to read it here.
local function reslot(i, r)
  i = tostring(i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  r = r or rec(i)
  if r.p or r.d then return end
  if r.l and lane_head(r.l) ~= tonumber(i) then return end
  if r.h and r.x then
    redis.call('ZADD', K_TIMED, r.x, i)
  elseif r.r then
    redis.call('ZADD', K_TIMED, r.r, i)
  else
    redis.call('ZADD', K_READY, i, i)
  end
end

-- Event i (a string; with lane `lane`, or nil) is processed: it leaves the queues,
-- and the next event of its lane becomes ready unless it is dead-lettered
-- (a dead head blocks). The caller counts it out of `pending_count`.
local function settle(i, lane)
  redis.call('ZREM', K_PENDING, i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  if not lane then return end
  redis.call('ZREM', K_LANES, lane_member(lane, i))
  local head = lane_head(lane)
  if head then reslot(head) end
end

-- Event i (a string) is dead-lettered: no longer pending, never claimable, and it
-- stays at the head of its lane so the lane is blocked. The caller counts
-- it out of `pending_count`.
local function dead_letter(i)
  redis.call('ZREM', K_PENDING, i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  redis.call('HINCRBY', K_SUM, 'failed_count', 1)
  redis.call('HSET', K_REC, rf(i, 'd'), NOW)
end

local function has_pending()
  return redis.call('ZCARD', K_PENDING) > 0
end

-- After every write that appends, claims, completes or fails: writes the
-- summary fields in `fields` (a flat list) with the session's last write
-- time (never moving back, even when the clock does) in one HSET, and
-- keeps its membership of the pending-sessions set (PS1): `pending_count`
-- in the summary always equals the size of `pending`, so the set changes
-- only when the count crosses zero.
local function touch(sum, pending_after, fields)
  if not sum.updated_at or sum.updated_at < NOW then
    fields[#fields + 1] = 'updated_at'
    fields[#fields + 1] = ARGV[2]
  end
  if pending_after ~= sum.pending_count then
    fields[#fields + 1] = 'pending_count'
    fields[#fields + 1] = pending_after
  end
  if #fields > 0 then redis.call('HSET', K_SUM, unpack(fields)) end
  if pending_after > 0 and sum.pending_count == 0 then
    redis.call('ZADD', K_PENDING_SESSIONS, 0, SESSION)
  elseif pending_after == 0 and sum.pending_count > 0 then
    redis.call('ZREM', K_PENDING_SESSIONS, SESSION)
  end
end

-- Appends n events whose 7 arguments each start at ARGV[at]:
-- id, type, payload json, lane (raw), lane (encoded), settled '1'|'0',
-- cause `{index}:{attempt}` or ''. `base` is the frontier before them.
-- Returns the number of pending events it added; the caller writes
-- `event_count` = base + n and the pending count (through `touch`).
local function append_events(n, at, base, fields)
  if base == 0 and n > 0 then
    fields[#fields + 1] = 'first_event_at'
    fields[#fields + 1] = ARGV[2]
    redis.call('ZADD', K_SESSIONS, 0, SESSION)
  end
  fields[#fields + 1] = 'event_count'
  fields[#fields + 1] = base + n
  local ids, rec_fields, pending, ready, lanes = {}, {}, {}, {}, {}
  -- lane -> true once the lane has an unprocessed event before this one
  local lane_busy = {}
  local added = 0
  for k = 1, n do
    local o = at + (k - 1) * 7
    local id, typ, payload = ARGV[o], ARGV[o + 1], ARGV[o + 2]
    local lane, lane_enc, settled, cause = ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
    local i = tostring(base + k)
    local fields = { 'id', id, 'type', typ, 'payload', payload, 'created_at', ARGV[2] }
    if lane ~= '' then
      fields[#fields + 1] = 'lane'
      fields[#fields + 1] = lane
    end
    if cause ~= '' then
      fields[#fields + 1] = 'cause'
      fields[#fields + 1] = cause
    end
    redis.call('XADD', K_LOG, i .. '-0', unpack(fields))
    ids[#ids + 1] = id
    ids[#ids + 1] = i
    if lane_enc ~= '' then
      rec_fields[#rec_fields + 1] = rf(i, 'l')
      rec_fields[#rec_fields + 1] = lane_enc
    end
    if settled == '1' then
      rec_fields[#rec_fields + 1] = rf(i, 'p')
      rec_fields[#rec_fields + 1] = ARGV[2]
    else
      -- A9: pending; lane-less events are ready at once, lane events when
      -- they head their lane (FIFO per lane). A new event has no lease,
      -- retry time or outcome yet.
      added = added + 1
      pending[#pending + 1] = i
      pending[#pending + 1] = i
      if lane_enc ~= '' then
        lanes[#lanes + 1] = 0
        lanes[#lanes + 1] = lane_member(lane_enc, i)
        local busy = lane_busy[lane_enc]
        if busy == nil then busy = lane_head(lane_enc) ~= nil end
        if not busy then
          ready[#ready + 1] = i
          ready[#ready + 1] = i
        end
        lane_busy[lane_enc] = true
      else
        ready[#ready + 1] = i
        ready[#ready + 1] = i
      end
    end
  end
  bulk('HSET', K_IDS, ids, 1000)
  bulk('HSET', K_REC, rec_fields, 1000)
  bulk('ZADD', K_PENDING, pending, 1000)
  bulk('ZADD', K_LANES, lanes, 1000)
  bulk('ZADD', K_READY, ready, 1000)
  return added
end

-- Checks that the n new ids (7 arguments apart from ARGV[at]) do not
-- exist in this session. Returns the first that exists, or nil.
local function existing_id(n, at)
  if n == 0 then return nil end
  local ids = {}
  for k = 1, n do ids[k] = ARGV[at + (k - 1) * 7] end
  for from = 1, n, 1000 do
    local part = redis.call('HMGET', K_IDS, unpack(ids, from, math.min(from + 999, n)))
    for k, v in ipairs(part) do
      if v then return ids[from + k - 1] end
    end
  end
  return nil
end

-- Publishes the wake-up of a write that appended events up to `last`
-- (ST2): `{"f":frontier,"t":created_at,"e":[...]}` carrying the events
-- when the caller built them within the size cap, else `{"f":frontier}`.
local function publish_wake(last, events_json)
  if events_json ~= '' then
    redis.call('PUBLISH', CHANNEL, '{"f":' .. last .. ',"t":' .. ARGV[2] .. ',"e":' .. events_json .. '}')
  else
    redis.call('PUBLISH', CHANNEL, '{"f":' .. last .. '}')
  end
end
