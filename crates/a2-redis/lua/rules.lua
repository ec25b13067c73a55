-- The rules the scripts decide, each the mirror of its Rust rule in
-- crates/a2-core/src/rules/ and held to that rule's decision table
-- (a2_core::rules::tables) row by row on a real redis-server by
-- crates/a2-redis/tests/lua_rules.rs. Pure functions of their arguments:
-- no redis.call, no globals. Records are tables as helpers.lua decodes
-- them (a: attempt count, h: holder, x: lease expiry, p: processed at,
-- d: dead-lettered at, c: cancelled at, r: retry or due time; times as
-- strings).

-- EX1 (Expiry::deadline): the deadline of a session with this ttl and
-- expiry time whose last activity was at `updated` (ms; all well within a
-- double's exact range; ttls are at most 100 years, X2).
local function deadline_of(ttl, at, updated)
  local d = ttl and updated + ttl
  if at and (not d or at < d) then d = at end
  return d
end

-- EX3 (rules::lifecycle::expired): whether a session whose deadline is
-- `d` (or nil) is gone at `now`.
local function has_expired(d, now)
  return d ~= nil and d <= now
end

-- C3, C5, F4, DL1 (rules::claim::waits_until): when a ready event with
-- record r can next be claimed: its lease's expiry while it is leased,
-- else its retry or due time; nil when nothing holds it.
local function waits_until(r)
  if r.h and r.x then return tonumber(r.x) end
  return tonumber(r.r or '')
end

-- C2 (rules::claim::claimable): whether that event may be claimed at `now`.
local function claimable(r, now)
  local at = waits_until(r)
  return at == nil or at <= now
end

-- A5, A6 (rules::append::classify): a batch of n events of which `found`
-- have ids the session has: 'none' (a new batch), 'all' (a retry, A5) or
-- 'some' (a partial duplicate, A6).
local function classify(found, n)
  if found == 0 then return 'none' end
  if found == n then return 'all' end
  return 'some'
end

-- RN1, RN2, RN3 (rules::renew::decide, with rules::lease::held): the fate
-- of renewing `attempt` for `holder` at `now` until `expires` for record
-- r: 'superseded', 'renew' or 'neither'.
local function renew_decision(r, attempt, holder, now, expires)
  local current = r.a or 0
  -- CN2: a cancel supersedes the attempt that was running.
  if current > attempt or r.c then return 'superseded' end
  local held = current == attempt and not r.p and not r.d and r.h == holder
    and r.x ~= nil and tonumber(r.x) > now
  if held and expires > now then return 'renew' end
  return 'neither'
end
