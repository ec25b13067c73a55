-- read: one bounded page of rows with their processing records, read in
-- one atomic step (R1, R2, I2).
-- KEYS[1..11]: the session keys (helpers.lua)
-- ARGV[1..3]: session id, now, events channel (helpers.lua)
-- ARGV[4]: 'asc' or 'desc'
-- ARGV[5]: asc: exclusive lower bound; desc: exclusive upper bound or ''
--          for none
-- ARGV[6]: asc: inclusive upper bound or '' for the frontier; desc: unused
-- ARGV[7]: the page size
-- Returns: {frontier, row...}; rows ascend for 'asc', descend for 'desc'.
local last = frontier()
local reply = { last }
local count = tonumber(ARGV[7])
local entries
if ARGV[4] == 'asc' then
  local after = tonumber(ARGV[5])
  local through = last
  if ARGV[6] ~= '' and tonumber(ARGV[6]) < through then through = tonumber(ARGV[6]) end
  if after >= through then return reply end
  entries = redis.call('XRANGE', K_LOG, string.format('%d-0', after + 1),
    string.format('%d-0', through), 'COUNT', count)
else
  local before = last + 1
  if ARGV[5] ~= '' and tonumber(ARGV[5]) < before then before = tonumber(ARGV[5]) end
  if before <= 1 then return reply end
  entries = redis.call('XREVRANGE', K_LOG, string.format('%d-0', before - 1), '-', 'COUNT', count)
end
for _, entry in ipairs(entries) do reply[#reply + 1] = row_of(entry) end
return reply
