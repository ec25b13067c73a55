-- read: one bounded page of rows with their processing records, read in
-- one atomic step (R1, R2, I2).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: direction -- 'asc' or 'desc'
-- ARGV[6]: bound -- asc: exclusive lower bound; desc: exclusive upper
--          bound or '' for none
-- ARGV[7]: through -- asc: inclusive upper bound or '' for the frontier;
--          desc: unused
-- ARGV[8]: count -- the page size
-- Returns: {frontier, row...}; rows ascend for 'asc', descend for 'desc'.
local last = tonumber(redis.call('HGET', K_META, 'event_count') or '0')
local reply = { last }
local count = tonumber(ARGV[8])
local entries
if ARGV[5] == 'asc' then
  local after = tonumber(ARGV[6])
  local through = last
  if ARGV[7] ~= '' and tonumber(ARGV[7]) < through then through = tonumber(ARGV[7]) end
  if after >= through then return reply end
  entries = redis.call('XRANGE', K_LOG, string.format('%d-0', after + 1),
    string.format('%d-0', through), 'COUNT', count)
else
  local before = last + 1
  if ARGV[6] ~= '' and tonumber(ARGV[6]) < before then before = tonumber(ARGV[6]) end
  if before <= 1 then return reply end
  entries = redis.call('XREVRANGE', K_LOG, string.format('%d-0', before - 1), '-', 'COUNT', count)
end
for _, row in ipairs(rows_of(entries)) do reply[#reply + 1] = row end
return reply
