-- release: ends a holder's unexpired leases at once (RL1).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: holder
-- ARGV[6..]: claims -- pairs index, attempt (ascending, distinct)
-- Returns: the released indexes, ascending.
local holder = ARGV[5]
local indexes = {}
for k = 6, #ARGV, 2 do indexes[#indexes + 1] = ARGV[k] end
local got = load(indexes, true)
local released = {}
for k, si in ipairs(indexes) do
  local i = tonumber(si)
  local attempt = tonumber(ARGV[5 + 2 * k])
  if i >= 1 and i <= S_event_count then
    local r = decode(got[EXTRA + k - 1])
    if (r.a or 0) == attempt and r.h == holder and tonumber(r.x or '0') > NOW
        and not r.p and not r.d then
      r.h, r.x = nil, nil
      put_rec(si, r)
      reslot(si, r)
      released[#released + 1] = i
    end
  end
end
flush(false)
-- PS2: released events are claimable at once; workers of other processes
-- waiting for the leases' expiry look now.
if #released > 0 then redis.call(PUBLISH, key('work'), SESSION) end
return released
