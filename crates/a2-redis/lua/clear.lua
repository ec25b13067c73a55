-- clear: deletes a session entirely: events, processing records,
-- snapshots, presence, its ids and its listing (I4).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- Returns: the number of events deleted.
local deleted = redis.call('XLEN', K_LOG)
redis.call('DEL', K_IDS, K_LOG, K_REC, K_SUM, K_PENDING, K_READY, K_TIMED, K_LANES, K_SNAPSHOTS, K_PRESENCE)
redis.call('ZREM', K_SESSIONS, SESSION)
redis.call('ZREM', K_PENDING_SESSIONS, SESSION)
return deleted
