-- renew: extends leases still held (RN1-RN3).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: holder
-- ARGV[5]: the new lease expiry
-- ARGV[6]: m, then ARGV[7..]: m pairs index, attempt (ascending, distinct)
-- Returns: {{renewed index...}, {superseded index...}}
local holder, expires = ARGV[4], ARGV[5]
local last = frontier()
local renewed, superseded = {}, {}
for k = 1, tonumber(ARGV[6]) do
  local i = tonumber(ARGV[5 + 2 * k])
  local attempt = tonumber(ARGV[6 + 2 * k])
  if i >= 1 and i <= last then
    local current = rnum(i, 'a')
    if current > attempt then
      superseded[#superseded + 1] = i
    elseif current == attempt
        and rget(i, 'h') == holder
        and tonumber(rget(i, 'x') or '0') > NOW
        and tonumber(expires) > NOW
        and not rget(i, 'p')
        and not rget(i, 'd') then
      redis.call('HSET', K_REC, rf(i, 'x'), expires)
      reslot(i)
      renewed[#renewed + 1] = i
    end
  end
end
return { renewed, superseded }
