-- Drops index entries of sessions that no longer exist (expired by TTL or deleted by hand).
-- Each session is re-checked here, so one re-created since the caller looked is kept.
-- KEYS[1] app sessions zset, or (cluster layout) the user's app outbox stream;
--   KEYS[2] the app sessions-by-update zset (single node; in the cluster layout, the user's
--   sessions-by-update zset, unused here: every session names its own);
--   then for each session: its meta hash, its user sessions zset and its user
--   sessions-by-update zset (all of one user in the cluster layout)
-- ARGV[1] the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest outbox id
--         that may not be applied yet: older entries are dropped, newer ones returned
-- ARGV[2..] for each session, in the same order: its session id and its app sessions member
-- returns {dropped, outbox}: the number of sessions dropped from the indexes, and (cluster
--         layout) the outbox entries from the layout's id on, app index removals among them;
--         {-4, command, key} when the ACL user may not run a command it needs (nothing written)
local cluster, unapplied = layout(ARGV[1])
local refused = nil
for i = 3, #KEYS, 3 do
  refused = refused or denied('EXISTS', KEYS[i], 'ZREM', KEYS[i + 1], 'ZREM', KEYS[i + 2])
end
refused = refused
  or (cluster and denied('TYPE', KEYS[1], 'XADD', KEYS[1], 'XTRIM', KEYS[1], 'XRANGE', KEYS[1]))
  or (not cluster and denied('ZREM', KEYS[1], 'ZREM', KEYS[2]))
if refused then return refused end
if cluster then
  local t = redis.call('TYPE', KEYS[1])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= 'stream' then return {-3, KEYS[1], t} end
end
local dropped = 0
for i = 0, (#KEYS - 2) / 3 - 1 do
  local meta, user_index, user_updated = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  if redis.call('EXISTS', meta) == 0 then
    redis.call('ZREM', user_index, ARGV[2 + 2 * i])
    redis.call('ZREM', user_updated, ARGV[2 + 2 * i])
    if cluster then
      redis.call('XADD', KEYS[1], '*', 'index_rem', ARGV[3 + 2 * i])
    else
      redis.call('ZREM', KEYS[1], ARGV[3 + 2 * i])
      redis.call('ZREM', KEYS[2], ARGV[3 + 2 * i])
    end
    dropped = dropped + 1
  end
end
if not cluster then return {dropped, {}} end
redis.call('XTRIM', KEYS[1], 'MINID', unapplied)
return {dropped, redis.call('XRANGE', KEYS[1], unapplied, '+')}
