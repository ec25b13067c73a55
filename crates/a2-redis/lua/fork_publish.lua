-- fork_publish: checks a fork's target, and publishes a fork staged by
-- `fork_stage` (FK1, FK3, FK6): renames its hidden keys into place and
-- writes the session's counters, origin and listing in one step, so the
-- target appears complete or not at all.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: mode -- 'check' (answers only), 'publish', or 'drop' (deletes
--          the staged keys)
-- ARGV[6]: token -- the fork's hidden name
-- ARGV[7]: source -- the source's id
-- ARGV[8]: at -- the fork's last index
-- ARGV[9]: first -- its first index (the source's first retained one)
-- ARGV[10]: expiry -- `{ttl}|{expires_at}`, or '' for none (EX2)
-- ARGV[11]: counters -- `{pending} {failed} {attempts} {failures} {first_event_at}`
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
if redis.call('XLEN', stage .. 'log') ~= tonumber(at) - tonumber(first) + 1 then
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
  'updated_at', NOW, 'cursor', at, 'fork_of', source, 'fork_at', at }
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
if followers then
  redis.call(PUBLISH, events_channel(), '{"f":' .. at .. '}')
end
return { 'forked' }
