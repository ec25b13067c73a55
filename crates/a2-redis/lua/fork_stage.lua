-- fork_stage: writes one part of a fork under hidden names in the target's
-- partition (FK6). Nothing reads them until `fork_publish` renames them
-- into place in one step; they expire ten minutes after their last write
-- (by the server's clock), so a fork whose client died leaves nothing
-- behind for long. Sent again after a lost reply it writes nothing twice:
-- entries at or below the hidden log's last are skipped, the rest are
-- sets.
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: token -- the fork's hidden name
-- ARGV[6]: counts -- `{entries} {records} {ready} {timed} {lanes} {snapshots}`
-- ARGV[7..]: items -- the entries (each: index, field count n, then n texts:
--            name, value, ...), the records (index, JSON), the ready
--            indexes, the timed ones (time, index), the lane members,
--            the snapshots (reducer, value)
-- Returns: {'ok'}.
local stage = fork_stage(ARGV[5])
local log, meta = stage .. 'log', stage .. 'meta'
local n_entries, n_records, n_ready, n_timed, n_lanes, n_snaps =
  string.match(ARGV[6], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
local p = 7
local top = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
local last = 0
if top[1] then last = tonumber(string.match(top[1][1], '^(%d+)')) end
local ids = {}
for _ = 1, tonumber(n_entries) do
  local index, n = ARGV[p], tonumber(ARGV[p + 1])
  if tonumber(index) > last then
    redis.call('XADD', log, index .. '-0', unpack(ARGV, p + 2, p + 1 + n))
  end
  for j = p + 2, p + 1 + n, 2 do
    if ARGV[j] == 'id' then
      ids[#ids + 1] = '#' .. ARGV[j + 1]
      ids[#ids + 1] = index
      break
    end
  end
  p = p + 2 + n
end
local function put_all(cmd, k, from, count, step)
  for s = from, from + count - 1, step do
    local args = {}
    for j = s, math.min(s + step - 1, from + count - 1) do args[#args + 1] = ARGV[j] end
    if cmd == 'ZADD0' then
      local scored = {}
      for _, m in ipairs(args) do scored[#scored + 1] = '0' scored[#scored + 1] = m end
      redis.call('ZADD', k, unpack(scored))
    elseif cmd == 'ZADDI' then
      local scored = {}
      for _, m in ipairs(args) do scored[#scored + 1] = m scored[#scored + 1] = m end
      redis.call('ZADD', k, unpack(scored))
    else
      redis.call(cmd, k, unpack(args))
    end
  end
end
for s = 1, #ids, 1000 do
  redis.call('HSET', meta, unpack(ids, s, math.min(s + 999, #ids)))
end
local counts = { tonumber(n_records) * 2, tonumber(n_ready), tonumber(n_timed) * 2,
  tonumber(n_lanes), tonumber(n_snaps) * 2 }
if counts[1] > 0 then put_all('HSET', meta, p, counts[1], 1000) end
p = p + counts[1]
if counts[2] > 0 then put_all('ZADDI', stage .. 'ready', p, counts[2], 500) end
p = p + counts[2]
if counts[3] > 0 then put_all('ZADD', stage .. 'timed', p, counts[3], 1000) end
p = p + counts[3]
if counts[4] > 0 then put_all('ZADD0', stage .. 'lanes', p, counts[4], 500) end
p = p + counts[4]
if counts[5] > 0 then put_all('HSET', stage .. 'snapshots', p, counts[5], 1000) end
for _, name in ipairs({ 'log', 'meta', 'ready', 'timed', 'lanes', 'snapshots' }) do
  redis.call('PEXPIRE', stage .. name, 600000)
end
return { 'ok' }
