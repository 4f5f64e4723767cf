-- Lists an app in the registry of app names that operators' listings read, unless it is
-- listed already (or, asked to check only, tells whether it could). On a cluster, where the
-- registry lives in no app's slot, a create checks before its user-slot step and lists after
-- it, so that a registry it could not write fails the create with nothing written.
-- Writes only for an app not yet listed, so a Redis user that may only read the registry
-- (a tenant, whose app an operator registered: docs/security.md#tenants) never writes it,
-- and no tenant can remove, retype or hide another app's entry.
-- uses: _permitted
-- KEYS[1] apps: the apps zset (member: the escaped app name, scored by its first creation
--   time)
-- ARGV[1] app_member: the app's member
-- ARGV[2] first_created: its first session's creation time (float text)
-- ARGV[3] write: '1' to list it, '' to check only
-- returns 1 when it listed the app (checking: when it would), 0 when it was listed already,
--         {-3, key, found type} when
--         the key has a foreign type, {-4, command, key} when the ACL user may not run a
--         command it needs (nothing written either way)
-- ZADD is asked for only when it would run: a tenant may list nothing, only read.
local function plan(listing)
  return denied('TYPE', KEYS[1], 'ZSCORE', KEYS[1]) or (listing and denied('ZADD', KEYS[1]))
end
local refused = plan(false)
if refused then return refused end
local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t['ok'] end
if t ~= 'none' and t ~= 'zset' then return {-3, KEYS[1], t} end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
refused = plan(true)
if refused then return refused end
if ARGV[3] == '1' then redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1]) end
return 1
