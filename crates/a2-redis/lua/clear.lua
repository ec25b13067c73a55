-- clear: deletes a session entirely: events, processing records, ids,
-- snapshots, presence and its listing (I4).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- Returns: the number of events deleted.
local deleted = redis.call('XLEN', K_LOG)
-- The live feeds following the session stay counted: they end when they
-- find it cleared, and each takes itself off the count then.
local followers = redis.call('HGET', K_META, 'followers')
redis.call('DEL', K_LOG, K_META, key('ready'), K_TIMED, key('lanes'), key('snapshots'), key('presence'))
if followers then redis.call('HSET', K_META, 'followers', followers) end
redis.call('ZREM', key('sessions'), SESSION)
redis.call('ZREM', key('pending'), SESSION)
redis.call('ZREM', key('expiring'), SESSION)
-- Open feeds re-read at once and find their session cleared (ST6).
redis.call(PUBLISH, events_channel(), '{"f":0}')
return deleted
