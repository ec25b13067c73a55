-- clear: deletes a session entirely: events, processing records, ids,
-- snapshots, presence and its listing (I4).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- Returns: the number of events deleted.
local deleted = redis.call('XLEN', K_LOG)
redis.call('DEL', K_LOG, K_META, K_READY, K_TIMED, key('lanes'), key('snapshots'), key('presence'))
redis.call('ZREM', key('sessions'), SESSION)
redis.call('ZREM', key('pending'), SESSION)
-- Open feeds re-read at once and find their session cleared (ST6).
redis.call(PUBLISH, EVENTS, '{"f":0}')
return deleted
