-- Deletes a session, its events and its index entries; user and app state stay.
-- uses: _permitted, _layout
-- KEYS[1] meta: the session's metadata hash
-- KEYS[2] state: the session state hash
-- KEYS[3] events: the events stream
-- KEYS[4] event_ids: the event ids hash
-- KEYS[5] user_sessions: the user's sessions zset
-- KEYS[6] app_sessions: the app's sessions zset, or (cluster layout) the user's app outbox
--   stream
-- KEYS[7] user_updated: the user's sessions-by-update zset
-- KEYS[8] compactions: the compactions zset (see append_event.lua)
-- KEYS[9] app_updated: the app's sessions-by-update zset (single node only)
-- KEYS[10] app_expiry: the app's expiry index (_expiry.lua; single node only: on a cluster
--   the outbox's index_rem drops the session there too)
-- ARGV[1] session_id: the session's id
-- ARGV[2] app_member: its member in the app sessions zset
-- ARGV[3] layout: the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest
--   outbox id that may not be applied yet: older entries are dropped, newer ones returned
-- returns {n, outbox}: n = 1 when something was deleted, 0 when there was nothing; outbox
--         (cluster layout) = entries from the layout's id on, the app index removal among them, for
--         the caller to apply; {-3, key, found type} when an index has a foreign type
--         (nothing deleted), {-4, command, key} when the ACL user may not run a command it
--         needs (nothing deleted)
local cluster, unapplied = layout(ARGV[3])
local refused = denied('TYPE', KEYS[5], 'TYPE', KEYS[6], 'DEL', KEYS[1], 'DEL', KEYS[2],
    'DEL', KEYS[3], 'DEL', KEYS[4], 'DEL', KEYS[8], 'ZREM', KEYS[5], 'TYPE', KEYS[7],
    'ZREM', KEYS[7])
  or (cluster and denied('XADD', KEYS[6], 'XTRIM', KEYS[6], 'XRANGE', KEYS[6]))
  or (not cluster and denied('ZREM', KEYS[6], 'TYPE', KEYS[9], 'ZREM', KEYS[9],
    'TYPE', KEYS[10], 'ZREM', KEYS[10]))
if refused then return refused end
for i, key in ipairs({KEYS[5], KEYS[6], KEYS[7], KEYS[9], KEYS[10]}) do
  local want = (cluster and i == 2) and 'stream' or 'zset'
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, key, t} end
end
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8])
n = n + redis.call('ZREM', KEYS[5], ARGV[1])
n = n + redis.call('ZREM', KEYS[7], ARGV[1])
if not cluster then
  n = n + redis.call('ZREM', KEYS[6], ARGV[2])
  n = n + redis.call('ZREM', KEYS[9], ARGV[2])
  redis.call('ZREM', KEYS[10], ARGV[2])
  return {n > 0 and 1 or 0, {}}
end
-- The app index is in another slot: its removal is applied from the outbox, after any
-- earlier entry of this user (a create of the same id) in order.
if n > 0 then redis.call('XADD', KEYS[6], '*', 'index_rem', ARGV[2]) end
redis.call('XTRIM', KEYS[6], 'MINID', unapplied)
return {n > 0 and 1 or 0, redis.call('XRANGE', KEYS[6], unapplied, '+')}
