-- set_expiry: replaces a session's expiry (EX1, EX2); setting it is
-- activity, so `flush` moves `updated_at` and the keys' expiry (EX5).
-- KEYS, ARGV[1..4]: the session prelude (src/lua.rs)
-- ARGV[5]: expiry -- `{ttl}|{expires_at}`, both parts empty for none
-- Returns: {'ok', deadline or ''}; {'none'} for a session without events
--          (or expired, EX3), nothing written.
load(nil, true)
if S_event_count == 0 then return { 'none' } end
set_exp(ARGV[5])
flush(true)
local updated = S_updated_at
if not updated or updated < NOW then updated = NOW end
local d = (S_ttl or S_xat) and deadline_of(S_ttl, S_xat, updated)
return { 'ok', d and fmt('%d', d) or '' }
