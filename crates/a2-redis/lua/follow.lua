-- follow: the mark that makes a session's writes publish wake-ups (ST2).
-- Every store instance whose live feeds follow the session holds an entry
-- in the session's `followers` sorted set, scored by the server time (ms)
-- at which it lapses; the session hash's `followers` field holds the
-- latest of those times, which writes compare with the server's clock
-- (`following` in helpers.lua). An instance refreshes its entry before
-- its first feed's first read and then every refresh period for all its
-- sessions in one request (src/keeper.rs), each time for `ttl` (three
-- periods): a crashed instance stops costing publishes within three
-- periods, and a deleted mark is back at the next refresh. It takes its
-- entry off when its last feed of the session ends and when the store
-- closes.
-- KEYS[1]: meta -- the session's hash
-- KEYS[2]: followers -- the session's sorted set of following instances
-- ARGV[1]: mode -- 'refresh' or 'release'
-- ARGV[2]: instance -- the store instance's id
-- ARGV[3]: ttl -- how long (ms) a refreshed entry lasts
-- Returns: for a refresh, {lost, frontier}: lost is 1 when the mark was
-- not in force for this instance (its first refresh, a lapse, a deleted
-- set or hash), so writes may have gone unannounced and its feeds of the
-- session read; frontier is the session's last index (0 for none), which
-- a feed behind it reads up to (a wake-up lost any other way). For a
-- release, the number of instances still following.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lost = 0
if ARGV[1] == 'refresh' then
  local mine = redis.call('ZSCORE', KEYS[2], ARGV[2])
  local field = redis.call('HGET', KEYS[1], 'followers')
  if not mine or tonumber(mine) <= now or not field or tonumber(field) <= now then
    lost = 1
  end
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
else
  redis.call('ZREM', KEYS[2], ARGV[2])
end
-- Entries of instances that stopped refreshing (a crash) go.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if last then
  redis.call('HSET', KEYS[1], 'followers', last)
  redis.call('PEXPIREAT', KEYS[2], last)
else
  -- The field goes with the last entry (and the hash with it, when the
  -- session has nothing else).
  redis.call('HDEL', KEYS[1], 'followers')
end
if ARGV[1] == 'refresh' then
  return { lost, tonumber(redis.call('HGET', KEYS[1], 'event_count') or '0') }
end
return redis.call('ZCARD', KEYS[2])
