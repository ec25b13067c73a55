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
-- KEYS[7]: ids       store-wide hash, event id -> `{index}:{session id}`
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

local function rf(i, attr)
  return tostring(i) .. ':' .. attr
end

local function rget(i, attr)
  return redis.call('HGET', K_REC, rf(i, attr))
end

local function rnum(i, attr)
  return tonumber(redis.call('HGET', K_REC, rf(i, attr)) or '0')
end

local function frontier()
  return tonumber(redis.call('HGET', K_SUM, 'event_count') or '0')
end

-- One row: { entry id, { field, value, ... }, { record attrs in ROW_ATTRS order } }.
local function row_of(entry)
  local i = string.match(entry[1], '^(%d+)')
  local fields = {}
  for n, attr in ipairs(ROW_ATTRS) do fields[n] = rf(i, attr) end
  return { entry[1], entry[2], redis.call('HMGET', K_REC, unpack(fields)) }
end

local function row(i)
  local entries = redis.call('XRANGE', K_LOG, tostring(i) .. '-0', tostring(i) .. '-0')
  return row_of(entries[1])
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
-- its lease expiry or retry time; else in `ready`.
local function reslot(i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  if rget(i, 'p') or rget(i, 'd') then return end
  local lane = rget(i, 'l')
  if lane and lane_head(lane) ~= i then return end
  local holder, lease, retry = rget(i, 'h'), rget(i, 'x'), rget(i, 'r')
  if holder and lease then
    redis.call('ZADD', K_TIMED, lease, i)
  elseif retry then
    redis.call('ZADD', K_TIMED, retry, i)
  else
    redis.call('ZADD', K_READY, i, i)
  end
end

-- Makes event i pending (A9): lane-less events are ready at once, lane
-- events when they head their lane (FIFO per lane).
local function enqueue(i, lane)
  redis.call('ZADD', K_PENDING, i, i)
  redis.call('HINCRBY', K_SUM, 'pending_count', 1)
  if lane ~= '' then redis.call('ZADD', K_LANES, 0, lane_member(lane, i)) end
  reslot(i)
end

-- Event i is processed: it leaves the queues, and the next event of its
-- lane becomes ready unless it is dead-lettered (a dead head blocks).
local function settle(i)
  redis.call('ZREM', K_PENDING, i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  redis.call('HINCRBY', K_SUM, 'pending_count', -1)
  local lane = rget(i, 'l')
  if not lane then return end
  redis.call('ZREM', K_LANES, lane_member(lane, i))
  local head = lane_head(lane)
  if head then reslot(head) end
end

-- Event i is dead-lettered: no longer pending, never claimable, and it
-- stays at the head of its lane so the lane is blocked.
local function dead_letter(i)
  redis.call('ZREM', K_PENDING, i)
  redis.call('ZREM', K_READY, i)
  redis.call('ZREM', K_TIMED, i)
  redis.call('HINCRBY', K_SUM, 'pending_count', -1)
  redis.call('HINCRBY', K_SUM, 'failed_count', 1)
  redis.call('HSET', K_REC, rf(i, 'd'), NOW)
end

local function has_pending()
  return redis.call('ZCARD', K_PENDING) > 0
end

-- After every write that appends, claims, completes or fails: the
-- session's last write time (never moving back, even when the clock does)
-- and its membership of the pending-sessions set (PS1).
local function touch()
  local updated = tonumber(redis.call('HGET', K_SUM, 'updated_at') or '')
  if not updated or updated < NOW then redis.call('HSET', K_SUM, 'updated_at', ARGV[2]) end
  if has_pending() then
    redis.call('ZADD', K_PENDING_SESSIONS, 0, SESSION)
  else
    redis.call('ZREM', K_PENDING_SESSIONS, SESSION)
  end
end

-- Appends n events whose 7 arguments each start at ARGV[at]:
-- id, type, payload json, lane (raw), lane (encoded), settled '1'|'0',
-- cause `{index}:{attempt}` or ''. Returns the first new index.
local function append_events(n, at)
  local base = frontier()
  if base == 0 and n > 0 then
    redis.call('HSET', K_SUM, 'first_event_at', NOW)
    redis.call('ZADD', K_SESSIONS, 0, SESSION)
  end
  for k = 1, n do
    local o = at + (k - 1) * 7
    local id, typ, payload = ARGV[o], ARGV[o + 1], ARGV[o + 2]
    local lane, lane_enc, settled, cause = ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
    local i = base + k
    local fields = { 'id', id, 'type', typ, 'payload', payload, 'created_at', ARGV[2] }
    if lane ~= '' then
      fields[#fields + 1] = 'lane'
      fields[#fields + 1] = lane
    end
    if cause ~= '' then
      fields[#fields + 1] = 'cause'
      fields[#fields + 1] = cause
    end
    redis.call('XADD', K_LOG, tostring(i) .. '-0', unpack(fields))
    redis.call('HSET', K_IDS, id, tostring(i) .. ':' .. SESSION)
    if lane_enc ~= '' then redis.call('HSET', K_REC, rf(i, 'l'), lane_enc) end
    if settled == '1' then
      redis.call('HSET', K_REC, rf(i, 'p'), NOW)
    else
      enqueue(i, lane_enc)
    end
  end
  redis.call('HSET', K_SUM, 'event_count', base + n)
  return base + 1
end

-- Checks that the n new ids (7 arguments apart from ARGV[at]) exist
-- nowhere. Returns the first that exists, or nil.
local function existing_id(n, at)
  for k = 1, n do
    local id = ARGV[at + (k - 1) * 7]
    if redis.call('HEXISTS', K_IDS, id) == 1 then return id end
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
