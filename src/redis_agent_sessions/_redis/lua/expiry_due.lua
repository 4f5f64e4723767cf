-- The due members of an app's expiry index (_expiry.lua), for the sweep to check.
-- uses: _permitted, _expiry
-- KEYS[1] expiry: the app's expiry index (ras:{<app>}:sessions_expiry)
-- ARGV[1] now_ms: the caller's clock, whole ms since the epoch
-- ARGV[2] at_most: at most this many
-- ARGV[3] claim: '1' to claim them (see expiry_due in _expiry.lua), '' to only read them (a
--   dry run)
-- returns the members, earliest due first; {-3, key, found type} when the key has a foreign
--         type, {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written either way)
local refused = denied('TYPE', KEYS[1], 'ZRANGE', KEYS[1])
  or (ARGV[3] == '1' and denied('ZADD', KEYS[1]))
if refused then return refused end
local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t['ok'] end
if t ~= 'none' and t ~= 'zset' then return {-3, KEYS[1], t} end
if ARGV[3] == '1' then return expiry_due(KEYS[1], ARGV[1], tonumber(ARGV[2])) end
return redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
