-- Shared by the partition scripts (list_sessions, pending_sessions).
-- The percent-encoding of src/layout.rs, byte for byte.
local function enc(name)
  return (string.gsub(name, '[^A-Za-z0-9%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end
