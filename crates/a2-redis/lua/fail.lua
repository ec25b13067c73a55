-- fail: records a failed attempt; dead-letters at max_failures (F1-F6).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: index
-- ARGV[5]: attempt
-- ARGV[6]: error message
-- ARGV[7]: max failures, at least 1
-- ARGV[8]: retry at (store clock, ms), or '' for at once
-- Returns: {'invalid'} (F1), or {outcome, failure count} with outcome
--          'failed', 'dead' or 'superseded'.
local i, attempt = tonumber(ARGV[4]), tonumber(ARGV[5])
local sum = summary()
if i < 1 or i > sum.event_count then return { 'invalid' } end
local si = ARGV[4]
local r = rec(si)
local failures = tonumber(r.n or '0')
local current = tonumber(r.a or '0')
if r.p or current ~= attempt or current == 0 then return { 'superseded', failures } end
if r.d then return { 'dead', failures } end
-- Without a lease the attempt is over: it failed already (F4), or it was
-- released (F5).
if not r.h then
  if tonumber(r.la or '0') == attempt then return { 'failed', failures } end
  return { 'superseded', failures }
end

failures = failures + 1
r.n, r.e, r.lf, r.la, r.h, r.x = tostring(failures), ARGV[6], ARGV[2], tostring(attempt), false, false
redis.call('HSET', K_REC, rf(si, 'n'), failures, rf(si, 'e'), ARGV[6], rf(si, 'lf'), ARGV[2], rf(si, 'la'), ARGV[5])
redis.call('HINCRBY', K_SUM, 'failure_count', 1)
local outcome = 'failed'
local pending = sum.pending_count
if failures >= tonumber(ARGV[7]) then
  redis.call('HDEL', K_REC, rf(si, 'h'), rf(si, 'x'), rf(si, 'r'))
  dead_letter(si)
  pending = pending - 1
  outcome = 'dead'
elseif ARGV[8] ~= '' then
  redis.call('HDEL', K_REC, rf(si, 'h'), rf(si, 'x'))
  redis.call('HSET', K_REC, rf(si, 'r'), ARGV[8])
  r.r = ARGV[8]
else
  redis.call('HDEL', K_REC, rf(si, 'h'), rf(si, 'x'), rf(si, 'r'))
  r.r = false
end
if outcome == 'failed' then reslot(si, r) end
touch(sum, pending, {})
return { outcome, failures }
