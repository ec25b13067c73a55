-- fail: records a failed attempt; dead-letters at max failures (F1, F2, F3, F4, F5, F6).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: index
-- ARGV[6]: attempt
-- ARGV[7]: error -- the error message
-- ARGV[8]: max_failures -- at least 1
-- ARGV[9]: retry_at -- store clock, ms, or '' for at once
-- Returns: {'invalid'} (F1), or {outcome, failure count} with outcome
--          'failed', 'dead' or 'superseded'.
local si, attempt = ARGV[5], tonumber(ARGV[6])
local got = load({ si })
local i = tonumber(si)
if i < 1 or i > S_event_count then return { 'invalid' } end
local r = decode(got[EXTRA])
local failures = r.n or 0
local current = r.a or 0
if r.p or current ~= attempt or current == 0 then return { 'superseded', failures } end
if r.d then return { 'dead', failures } end
-- Without a lease the attempt is over: it failed already (F4), or it was
-- released (F5).
if not r.h then
  if (r.la or 0) == attempt then return { 'failed', failures } end
  return { 'superseded', failures }
end

failures = failures + 1
r.n, r.e, r.lf, r.la, r.h, r.x, r.r = failures, ARGV[7], NOW_S, attempt, nil, nil, nil
S_failure_count = S_failure_count + 1
local outcome = 'failed'
if failures >= tonumber(ARGV[8]) then
  -- Dead-lettered: never claimable again; it stays at the head of its
  -- lane, so the lane is blocked.
  r.d = NOW_S
  S_failed_count = S_failed_count + 1
  S_pending_count = S_pending_count - 1
  outcome = 'dead'
elseif ARGV[9] ~= '' then
  r.r = ARGV[9]
end
put_rec(si, r)
reslot(si, r)
flush(true)
return { outcome, failures }
