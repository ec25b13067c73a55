-- Shared by the partition scripts (list_sessions, pending_sessions).
-- The percent-encoding of src/layout.rs, byte for byte.
local function enc(name)
  return (string.gsub(name, '[^A-Za-z0-9%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

-- EX3: whether a session with this `exp` field and `updated_at` has
-- expired at `now`, decided as helpers.lua decides it for its scripts.
local function expired_at(exp, updated, now)
  if not exp then return false end
  local ttl, at = string.match(exp, '^(%d*)|(%-?%d*)$')
  ttl, at = tonumber(ttl), tonumber(at)
  local d = ttl and tonumber(updated or '0') + ttl
  if at and (not d or at < d) then d = at end
  return d ~= nil and d <= now
end
