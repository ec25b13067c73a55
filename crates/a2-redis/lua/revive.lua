-- revive: makes a dead-lettered event pending again (RV1, RV2, RV3).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: index
-- Returns: {'invalid'} for an index outside 1..frontier (RV1);
--          {'revived', row} when it was dead-lettered (RV2), the row as
--          it is now; {'not_dead', row} otherwise, nothing written (RV3);
--          {'corrupted'} when the event's log entry is missing (E1);
--          {'trimmed', first index} when the event was trimmed (TR3).
--          A row is { entry id, { field, value, ... }, record JSON or
--          false }, as `rows_of` builds it.
local si = ARGV[5]
local entry, r, stored = event_at(si)
if not entry then return r end
if not r.d or r.p then return { 'not_dead', { entry[1], entry[2], stored } } end

-- The failures go, and with them the event's share of the session's
-- failure count (I1 counts what the records hold). The attempt count
-- stays: the next claim is a new attempt, earlier ones stay superseded.
-- A dead head never left its lane's set, so `reslot` finds it heading
-- its lane and puts it in `ready`; the lane behind it follows.
local before = S_pending_count
S_failure_count = S_failure_count - (r.n or 0)
S_failed_count = S_failed_count - 1
S_pending_count = S_pending_count + 1
r.d, r.n, r.r, r.h, r.x = nil, nil, nil, nil, nil
local text = put_rec(si, r)
reslot(si, r)
-- `flush` lists the session in `pending` and publishes on WORK when its
-- pending count rose from zero (PS1, PS2). When it did not (events wait
-- behind this dead letter in its lane), the session is announced all the
-- same: workers that found nothing claimable there (C4) must look again.
flush(true)
if before > 0 then redis.call(PUBLISH, key('work'), SESSION) end
return { 'revived', { entry[1], entry[2], text } }
