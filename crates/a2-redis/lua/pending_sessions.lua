-- pending_sessions: a page of one partition's sessions with pending
-- events (PS1). Sessions leave the set lazily: one whose pending count
-- is 0 is dropped here (and its `in_pending` flag cleared), so writes
-- never churn the set. The client merges the pages of every partition.
-- KEYS[1]: pending -- the partition's sorted set of sessions with work
-- ARGV[1]: base -- the key prefix of the partition's sessions, as in
--          list_sessions.lua
-- ARGV[2]: min -- ZRANGEBYLEX min (from the cursor)
-- ARGV[3]: count -- how many sessions to return at most
-- ARGV[4]: now -- the store clock, for expiries (EX3)
-- Returns: the session ids, in byte order.
local want = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local min = ARGV[2]
local out = {}
while #out < want do
  local ids = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, want - #out)
  if #ids == 0 then break end
  local gone = {}
  for _, id in ipairs(ids) do
    local meta = ARGV[1] .. enc(id) .. ':meta'
    local v = redis.call('HMGET', meta, 'pending_count', 'exp', 'updated_at')
    local count = v[1]
    if count and expired_at(v[2], v[3], now) then
      -- EX3: an expired session has no work; its keys expire on the
      -- server, and a new session of the id joins the set again.
      gone[#gone + 1] = id
    elseif not count then
      -- No hash here (yet): while a cluster slot moves, the set may reach
      -- the importing master (`ASK`) before the session's hash, which
      -- still says `in_pending`. Dropping the session now would lose it
      -- for good (its next write would not add it back), so it stays,
      -- unlisted until its hash is here.
    elseif count + 0 > 0 then
      out[#out + 1] = id
    else
      gone[#gone + 1] = id
      redis.call('HDEL', meta, 'in_pending')
    end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
  min = '(' .. ids[#ids]
end
return out
