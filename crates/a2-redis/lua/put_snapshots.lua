-- put_snapshots: stores reducer snapshots that are newer than the stored
-- ones, all checked before any is written (S2).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5..]: snapshots -- 3 per snapshot: reducer, index, state json
-- Returns: {'invalid', index} for an index beyond the frontier (nothing
--          written; the index as given, text: beyond 2^53 a Lua number is
--          not exact, and a REST server may send it back as a double),
--          else {'ok', number stored}.
local n = (#ARGV - 4) / 3
local last, _, _, deadline, expired = bounds()
-- EX3: what is left of an expired session goes first, so these snapshots
-- are not deleted with it later.
if expired then reset_expired() end
for k = 1, n do
  local index = tonumber(ARGV[5 + (k - 1) * 3 + 1])
  if index > last then return { 'invalid', ARGV[5 + (k - 1) * 3 + 1] } end
end
local stored = 0
for k = 1, n do
  local o = 5 + (k - 1) * 3
  local reducer, index, state = ARGV[o], tonumber(ARGV[o + 1]), ARGV[o + 2]
  local current = redis.call('HGET', key('snapshots'), reducer)
  if not current or tonumber(string.match(current, '^(%d+)|')) < index then
    redis.call('HSET', key('snapshots'), reducer, ARGV[o + 1] .. '|' .. NOW_S .. '|' .. state)
    stored = stored + 1
  end
end
-- EX5: the snapshots expire with the session's other keys.
if stored > 0 and deadline then
  local px = deadline + GRACE - NOW
  redis.call('PEXPIRE', key('snapshots'), fmt('%d', px > 0 and px or 1))
end
return { 'ok', stored }
