-- close: closes a session at its frontier (CL1); its feeds read once more
-- and end when they reach it (CL4).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- Returns: {'closed', frontier, closed_at}; {'already', frontier,
--          closed_at} when it was closed before (nothing written);
--          {'empty'} for a session without events (nothing written).
-- EX3: an expired session has nothing to close.
if bounds() == 0 then return { 'empty' } end
local got = redis.call('HMGET', K_META, 'event_count', 'closed', 'closed_at', 'updated_at',
  'followers', 'exp')
if got[2] then return { 'already', got[2], got[3] } end
local frontier = tonumber(got[1] or '0')
if frontier == 0 then return { 'empty' } end
redis.call('HSET', K_META, 'closed', got[1], 'closed_at', NOW)
if not got[4] or tonumber(got[4]) < tonumber(NOW) then
  redis.call('HSET', K_META, 'updated_at', NOW)
end
-- EX1: a close is activity.
touch_expiry(got[6])
if following(got[5]) then
  redis.call(PUBLISH, events_channel(), '{"f":' .. got[1] .. ',"c":1}')
end
return { 'closed', got[1], NOW }
