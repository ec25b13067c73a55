-- follow: counts the store instances whose live feeds follow a session.
-- Its writes publish wake-ups only while the count is there (ST2,
-- `send_wake` in helpers.lua). An instance counts itself before its first
-- feed's first read and takes itself off when its last feed of the session
-- is dropped (src/follows.rs); a count a crashed process left behind only
-- costs publishes.
-- KEYS[1]: meta -- the session's hash
-- ARGV[1]: delta -- 1 when an instance starts following, -1 when it stops
-- Returns: the count after the change; the field goes at 0 (and with it
-- the hash, when the session has nothing else).
local n = redis.call('HINCRBY', KEYS[1], 'followers', ARGV[1])
if n <= 0 then
  redis.call('HDEL', KEYS[1], 'followers')
  return 0
end
return n
