-- presence_set: last-writer-wins presence write of one participant's
-- fields (P1, P2), publishing the applied part (P4).
-- KEYS, ARGV[1..4]: the session prelude of the namespace (src/lua.rs)
-- ARGV[5]: channel -- the namespace's presence channel
-- ARGV[6]: ttl -- in ms: applied entries expire at now + ttl
-- ARGV[7]: at -- the sender's `at`
-- ARGV[8]: head -- the published patch up to its values:
--          `{"participant":…,"seen":…,"at":…,"values":{`
-- ARGV[9..]: fields -- 3 per field: hash field, entry json or '' to
--          delete, the patch's `"field":value` fragment
-- Returns: the positions (1..n) of the fields that applied.
local at = tonumber(ARGV[7])
local expires = string.format('%d', NOW + tonumber(ARGV[6]))
local applied, fragments = {}, {}
for k = 1, (#ARGV - 8) / 3 do
  local o = 9 + (k - 1) * 3
  local field, entry = ARGV[o], ARGV[o + 1]
  local current = redis.call('HGET', key('presence'), field)
  local keep = false
  if current then
    local c_at, c_expires = string.match(current, '^(%-?%d+)|(%-?%d+)|')
    keep = tonumber(c_expires) > NOW and tonumber(c_at) > at
  end
  if not keep then
    if entry == '' then
      redis.call('HDEL', key('presence'), field)
    else
      redis.call('HSET', key('presence'), field, ARGV[7] .. '|' .. expires .. '|' .. entry)
    end
    applied[#applied + 1] = k
    fragments[#fragments + 1] = ARGV[o + 2]
  end
end
if #applied > 0 then
  redis.call(PUBLISH, ARGV[5], ARGV[8] .. table.concat(fragments, ',') .. '}}')
  -- An abandoned namespace must not stay forever (P5): the hash expires
  -- on the server an hour after its longest-lived entry would, by the
  -- server's clock. The hour keeps the store clock in charge of P2 (a
  -- test's manual clock may lag the server's); the expiry only grows.
  local keep = tonumber(ARGV[6]) + 3600000
  local left = redis.call('PTTL', key('presence'))
  if left == -1 or (left >= 0 and left < keep) then
    redis.call('PEXPIRE', key('presence'), keep)
  end
end
return applied
