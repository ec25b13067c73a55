-- read: one bounded page of rows with their processing records, read in
-- one atomic step with where the session's log starts and ends (R1, R2,
-- I2, TR3, CL4).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: direction -- 'asc', 'desc', or 'events' (ascending log entries
--          without their records: what a live feed reads)
-- ARGV[6]: bound -- asc, events: exclusive lower bound; desc: exclusive
--          upper bound or '' for none
-- ARGV[7]: through -- asc: inclusive upper bound or '' for the frontier;
--          events (which read to the end of the stream), desc: unused
-- ARGV[8]: count -- the page size
-- Returns: {frontier, first retained index, close frontier or '', deadline
--          or '', row...}, an expired session reading as one without
--          events (EX3);
--          rows ascend for 'asc', descend for 'desc'; for 'events' they
--          are log entries {entry id, {field, value, ...}}. An ascending
--          read whose bound lies below the first retained index reads
--          nothing: the caller reports `Trimmed` (TR3).
local last, first, closed, deadline = bounds()
local reply = { last, first, closed or '', deadline and fmt('%d', deadline) or '' }
local count = tonumber(ARGV[8])
local entries
if ARGV[5] == 'events' then
  -- To the end of the stream, as the log has it: the feed checks the
  -- indexes itself.
  local after = tonumber(ARGV[6])
  -- An unknown or expired session (EX3) has no events, whatever its keys
  -- still hold.
  if last == 0 or after + 1 < first then return reply end
  entries = redis.call('XRANGE', K_LOG, string.format('%d-0', after + 1), '+', 'COUNT', count)
  for _, entry in ipairs(entries) do reply[#reply + 1] = entry end
  return reply
elseif ARGV[5] == 'asc' then
  local after = tonumber(ARGV[6])
  local through = last
  if ARGV[7] ~= '' and tonumber(ARGV[7]) < through then through = tonumber(ARGV[7]) end
  if after >= through or after + 1 < first then return reply end
  entries = redis.call('XRANGE', K_LOG, string.format('%d-0', after + 1),
    string.format('%d-0', through), 'COUNT', count)
else
  local before = last + 1
  if ARGV[6] ~= '' and tonumber(ARGV[6]) < before then before = tonumber(ARGV[6]) end
  if before <= first then return reply end
  entries = redis.call('XREVRANGE', K_LOG, string.format('%d-0', before - 1),
    string.format('%d-0', first), 'COUNT', count)
end
for _, row in ipairs(rows_of(entries)) do reply[#reply + 1] = row end
return reply
