-- cancel: settles a pending or dead-lettered event as cancelled (CN1, CN2,
-- CN3, CN4, CN5).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: index
-- ARGV[6]: reason -- the reason as given, or '' for none
-- Returns: {'invalid'} for an index outside 1..frontier (CN4);
--          {'cancelled', row} when it was pending or dead-lettered (CN1),
--          the row as it is now; {'not_pending', row} when it was settled
--          already, nothing written (CN3); {'corrupted'} when the event's
--          log entry is missing (E1); {'trimmed', first index} when the
--          event was trimmed (CN4). A row is as `rows_of` builds it.
local si = ARGV[5]
local entry, r, stored = event_at(si)
if not entry then return r end
if r.p then return { 'not_pending', { entry[1], entry[2], stored } } end

-- CN5: the attempt running now, announced to the worker that holds it.
local running = nil
if r.h and (r.a or 0) > 0 then running = r.a end
if r.d then
  S_failed_count = S_failed_count - 1
else
  S_pending_count = S_pending_count - 1
end
-- CN1: settled (`p`) as cancelled (`c`), its lease, retry time and dead
-- letter gone; `settle` takes it out of the queues and moves its lane on.
r.p, r.c = NOW_S, NOW_S
if ARGV[6] ~= '' then r.cr = ARGV[6] end
r.h, r.x, r.r, r.d = nil, nil, nil, nil
local text = put_rec(si, r)
settle(si, r)
flush(true)
-- The lane moved on: workers that found nothing claimable look again.
if S_pending_count > 0 then redis.call(PUBLISH, key('work'), SESSION) end
if running then
  -- The partition's `cancels` channel, beside its `work` channel.
  local channel = string.sub(key('work'), 1, -5) .. 'cancels'
  redis.call(PUBLISH, channel, si .. ':' .. fmt('%d', running) .. ':' .. SESSION)
end
return { 'cancelled', { entry[1], entry[2], text } }
