-- renew: extends leases still held (RN1, RN2, RN3).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: holder
-- ARGV[6]: expires -- the new lease expiry
-- ARGV[7..]: claims -- pairs index, attempt (ascending, distinct)
-- Returns: {{renewed index...}, {superseded index...}}
local holder, expires = ARGV[5], ARGV[6]
local indexes = {}
for k = 7, #ARGV, 2 do indexes[#indexes + 1] = ARGV[k] end
local got = load(indexes, true)
local renewed, superseded = {}, {}
for k, si in ipairs(indexes) do
  local i = tonumber(si)
  local attempt = tonumber(ARGV[6 + 2 * k])
  if i >= 1 and i <= S_event_count then
    local r = decode(got[EXTRA + k - 1])
    local decision = renew_decision(r, attempt, holder, NOW, tonumber(expires))
    if decision == 'superseded' then
      superseded[#superseded + 1] = i
    elseif decision == 'renew' then
      r.x = expires
      put_rec(si, r)
      reslot(si, r)
      renewed[#renewed + 1] = i
    end
  end
end
flush(false)
return { renewed, superseded }
