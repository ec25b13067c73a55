-- release: ends a holder's unexpired leases at once (RL1).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: holder
-- ARGV[5]: m, then ARGV[6..]: m pairs index, attempt (ascending, distinct)
-- Returns: the released indexes, ascending.
local holder = ARGV[4]
local last = frontier()
local released = {}
for k = 1, tonumber(ARGV[5]) do
  local i = tonumber(ARGV[4 + 2 * k])
  local attempt = tonumber(ARGV[5 + 2 * k])
  if i >= 1 and i <= last
      and rnum(i, 'a') == attempt
      and rget(i, 'h') == holder
      and tonumber(rget(i, 'x') or '0') > NOW
      and not rget(i, 'p')
      and not rget(i, 'd') then
    redis.call('HDEL', K_REC, rf(i, 'h'), rf(i, 'x'))
    reslot(i)
    released[#released + 1] = i
  end
end
return released
