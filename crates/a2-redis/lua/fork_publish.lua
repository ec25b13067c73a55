-- fork_publish: checks a fork's target, and publishes a fork staged under
-- hidden names (FK1, FK3, FK6): first the fix-ups a copy restored from the
-- source's dumps needs (its events after the index, leases, snapshots past
-- the index and the source's own session fields go), then it renames the
-- hidden keys into place and writes the session's counters, origin and
-- listing, all in one step: the target appears complete or not at all.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: mode -- 'check' (answers only), 'publish', or 'drop' (deletes
--          the staged keys)
-- ARGV[6]: token -- the fork's hidden name
-- ARGV[7]: source -- the source's id
-- ARGV[8]: at -- the fork's last index
-- ARGV[9]: first -- its first index (the source's first retained one)
-- ARGV[10]: expiry -- `{ttl}|{expires_at}`, or '' for none (EX2)
-- ARGV[11]: counters -- `{pending} {failed} {attempts} {failures} {first_event_at}`
-- ARGV[12]: cursor -- the fork's claim cursor
-- ARGV[13]: fixes -- `{tail} {hdel} {unlease} {ready} {timed} {lanes} {records} {snapshots}`:
--           the number of events after the index in the staged log, then
--           how many items of each kind follow
-- ARGV[14..]: items -- meta fields to delete, members to take out of
--             timed, members to add to ready, timed entries (time, index),
--             lane members to delete, records (index, JSON), reducers to
--             delete
-- Returns: {'free'} (check: no target); {'already'} when the target is
--          this fork (FK3); {'exists', fork_of, fork_at} when it is
--          another session (nil for one of its own); {'forked'};
--          {'lost'} when the staged log is not whole (it expired: fork
--          again). Publish and drop delete the staged keys in every case.
local mode, source, at, first = ARGV[5], ARGV[7], ARGV[8], ARGV[9]
local stage = fork_stage(ARGV[6])
local names = { 'log', 'meta', 'ready', 'timed', 'lanes', 'snapshots' }
local function drop()
  for _, name in ipairs(names) do redis.call('DEL', stage .. name) end
end
if mode == 'drop' then drop() return { 'dropped' } end
local ec = bounds()
if ec > 0 then
  if mode == 'publish' then drop() end
  local origin = redis.call('HMGET', K_META, 'fork_of', 'fork_at')
  if origin[1] == source and origin[2] == at then return { 'already' } end
  return { 'exists', origin[1], origin[2] }
end
if mode == 'check' then return { 'free' } end
local log, meta = stage .. 'log', stage .. 'meta'
-- The fix-ups of a restored copy (none for one staged page by page).
local n = { string.match(ARGV[13], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$') }
for k = 1, 8 do n[k] = tonumber(n[k]) end
local p = 14
local function each(cmd, k, count, step, score)
  for s = p, p + count - 1, step do
    local args = {}
    for j = s, math.min(s + step - 1, p + count - 1) do
      if score then args[#args + 1] = ARGV[j] end
      args[#args + 1] = ARGV[j]
    end
    redis.call(cmd, k, unpack(args))
  end
  p = p + count
end
local at_n = tonumber(at)
if n[1] > 0 then
  for s = at_n + 1, at_n + n[1], 1000 do
    local ids = {}
    for i = s, math.min(s + 999, at_n + n[1]) do ids[#ids + 1] = i .. '-0' end
    redis.call('XDEL', log, unpack(ids))
  end
  -- The fork's next append is at + 1.
  redis.call('XSETID', log, at .. '-0')
  redis.call('ZREMRANGEBYSCORE', stage .. 'ready', '(' .. at, '+inf')
end
each('HDEL', meta, n[2], 1000)
each('ZREM', stage .. 'timed', n[3], 1000)
each('ZADD', stage .. 'ready', n[4], 500, true)
each('ZADD', stage .. 'timed', n[5], 1000)
each('ZREM', stage .. 'lanes', n[6], 1000)
each('HSET', meta, n[7], 1000)
each('HDEL', stage .. 'snapshots', n[8], 1000)
redis.call('HDEL', meta, 'event_count', 'first', 'closed', 'closed_at', 'exp', 'followers',
  'in_pending', 'fork_of', 'fork_at', 'updated_at', 'cursor')
if redis.call('XLEN', log) ~= at_n - tonumber(first) + 1 then
  drop()
  return { 'lost' }
end
-- What an expired session left goes (EX3); its feeds' count stays.
local followers = redis.call('HGET', K_META, 'followers')
redis.call('DEL', K_LOG, K_META, key('ready'), K_TIMED, key('lanes'), key('snapshots'))
redis.call('ZREM', key('expiring'), SESSION)
local into = { log = K_LOG, meta = K_META, ready = key('ready'), timed = K_TIMED,
  lanes = key('lanes'), snapshots = key('snapshots') }
for _, name in ipairs(names) do
  if redis.call('EXISTS', stage .. name) == 1 then
    redis.call('RENAME', stage .. name, into[name])
    redis.call('PERSIST', into[name])
  end
end
local pending, failed, attempts, failures, first_at =
  string.match(ARGV[11], '^(%d+) (%d+) (%d+) (%d+) (-?%d+)$')
local writes = { 'event_count', at, 'pending_count', pending, 'failed_count', failed,
  'attempt_count', attempts, 'failure_count', failures, 'first_event_at', first_at,
  'updated_at', NOW, 'cursor', ARGV[12], 'fork_of', source, 'fork_at', at }
if first ~= '1' then
  writes[#writes + 1] = 'first'
  writes[#writes + 1] = first
end
if followers then
  writes[#writes + 1] = 'followers'
  writes[#writes + 1] = followers
end
if pending ~= '0' then
  writes[#writes + 1] = 'in_pending'
  writes[#writes + 1] = '1'
end
if ARGV[10] ~= '' then
  writes[#writes + 1] = 'exp'
  writes[#writes + 1] = ARGV[10]
end
redis.call('HSET', K_META, unpack(writes))
redis.call('ZADD', key('sessions'), 0, SESSION)
if pending ~= '0' then
  redis.call('ZADD', key('pending'), 0, SESSION)
  redis.call(PUBLISH, key('work'), SESSION)
end
if ARGV[10] ~= '' then
  S_ttl, S_xat = parse_exp(ARGV[10])
  S_updated_at = tonumber(NOW)
  refresh_expiry()
end
-- A feed opened on the name before the fork reads the new log (ST2).
if following(followers) then
  redis.call(PUBLISH, events_channel(), '{"f":' .. at .. '}')
end
return { 'forked' }
