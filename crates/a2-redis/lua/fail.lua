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
if i < 1 or i > frontier() then return { 'invalid' } end
local failures = rnum(i, 'n')
local current = rnum(i, 'a')
if rget(i, 'p') or current ~= attempt or current == 0 then return { 'superseded', failures } end
if rget(i, 'd') then return { 'dead', failures } end
-- Without a lease the attempt is over: it failed already (F4), or it was
-- released (F5).
if not rget(i, 'h') then
  if rnum(i, 'la') == attempt then return { 'failed', failures } end
  return { 'superseded', failures }
end

failures = redis.call('HINCRBY', K_REC, rf(i, 'n'), 1)
redis.call('HSET', K_REC, rf(i, 'e'), ARGV[6], rf(i, 'lf'), ARGV[2], rf(i, 'la'), attempt)
redis.call('HDEL', K_REC, rf(i, 'h'), rf(i, 'x'))
redis.call('HINCRBY', K_SUM, 'failure_count', 1)
local outcome = 'failed'
if failures >= tonumber(ARGV[7]) then
  redis.call('HDEL', K_REC, rf(i, 'r'))
  dead_letter(i)
  outcome = 'dead'
elseif ARGV[8] ~= '' then
  redis.call('HSET', K_REC, rf(i, 'r'), ARGV[8])
else
  redis.call('HDEL', K_REC, rf(i, 'r'))
end
if outcome == 'failed' then reslot(i) end
touch()
return { outcome, failures }
