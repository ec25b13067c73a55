-- presence_read: the live presence entries of a namespace; expired ones
-- are deleted in the same step (P3).
-- KEYS, ARGV[1..4]: the session prelude of the namespace (src/lua.rs)
-- Returns: {`{at}|{expires_at}|{entry json}`...} of the live entries.
local all = redis.call('HGETALL', key('presence'))
local live, expired = {}, {}
for k = 1, #all, 2 do
  local expires = tonumber(string.match(all[k + 1], '^%-?%d+|(%-?%d+)|'))
  if expires > NOW then
    live[#live + 1] = all[k + 1]
  else
    expired[#expired + 1] = all[k]
  end
end
if #expired > 0 then redis.call('HDEL', key('presence'), unpack(expired)) end
return live
