-- list_sessions: a page of listed sessions with their counters (I1). Each
-- session costs one HMGET of its summary, whatever its number of events.
-- KEYS[1]: the store-wide sessions sorted set
-- It also reads each listed session's `sum` hash, whose name it builds from
-- the prefix: fine on one server (RD5), to be split for a cluster.
-- ARGV[1]: the key prefix
-- ARGV[2]: ZRANGEBYLEX min (from the cursor and name prefix)
-- ARGV[3]: ZRANGEBYLEX max
-- ARGV[4]: the page size; one more is read to know whether more follow
-- Returns: {session id, {event_count, pending_count, failed_count,
--          attempt_count, failure_count, first_event_at, updated_at}}...
-- The percent-encoding of src/keys.rs, byte for byte.
local function enc(name)
  return (string.gsub(name, '[^A-Za-z0-9%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]) + 1)
local reply = {}
for _, id in ipairs(ids) do
  local sum = ARGV[1] .. ':{' .. enc(id) .. '}:sum'
  reply[#reply + 1] = { id, redis.call('HMGET', sum, 'event_count', 'pending_count',
    'failed_count', 'attempt_count', 'failure_count', 'first_event_at', 'updated_at') }
end
return reply
