-- list_sessions: a page of one partition's listed sessions with their
-- counters (I1), first retained index (TR5), close time (CL5) and origin (FK5). Each session costs one HMGET of its counters, whatever
-- its number of events. The client merges the pages of every partition.
-- KEYS[1]: sessions -- the partition's sorted set of listed sessions
-- ARGV[1]: base -- the key prefix of the partition's sessions,
--          `{prefix}:{{tag}}:`; a session's hash is base .. encoded id .. ':meta'
-- ARGV[2]: min -- ZRANGEBYLEX min (from the cursor and name prefix)
-- ARGV[3]: max -- ZRANGEBYLEX max
-- ARGV[4]: count -- how many sessions to return at most
-- Returns: {session id, {event_count, pending_count, failed_count,
--          attempt_count, failure_count, first_event_at, updated_at,
--          first, closed_at, exp, fork_of, fork_at}}..., expired sessions included (the
--          client leaves them out by its clock, EX3).
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local reply = {}
for _, id in ipairs(ids) do
  reply[#reply + 1] = { id, redis.call('HMGET', ARGV[1] .. enc(id) .. ':meta', 'event_count',
    'pending_count', 'failed_count', 'attempt_count', 'failure_count', 'first_event_at',
    'updated_at', 'first', 'closed_at', 'exp', 'fork_of', 'fork_at') }
end
return reply
