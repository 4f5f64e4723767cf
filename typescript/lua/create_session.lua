-- Creates a session unless its id is taken, and writes its initial state in every scope.
-- Nothing is written when the session exists, so a failed duplicate create has no side effect.
-- uses: _permitted, _layout, _expiry
-- KEYS[1] meta: the session's metadata hash
-- KEYS[2] state: the session state hash
-- KEYS[3] events: the events stream
-- KEYS[4] event_ids: the event ids hash
-- KEYS[5] user_state: the user state hash
-- KEYS[6] user_sessions: the user's sessions zset
-- KEYS[7] user_updated: the user's sessions-by-update zset
-- KEYS[8] app_state: the app state hash, or (cluster layout) the user's app outbox stream
-- KEYS[9] app_sessions: the app's sessions zset (single node only)
-- KEYS[10] app_updated: the app's sessions-by-update zset (single node only)
-- KEYS[11] app_expiry: the app's expiry index (_expiry.lua; single node only)
--   (cluster layout: KEYS[8] is the user's app outbox stream, no KEYS[9..11])
-- The registry of app names is the caller's step (sessions/_apps.py, register_app.lua): a
-- tenant's user may only read it, and Redis refuses a script any key it may not write.
-- ARGV[1] session_id: the session's id
-- ARGV[2] app_name: the app's name
-- ARGV[3] user_id: the user's id
-- ARGV[4] create_time: the creation time (float text)
-- ARGV[5] ttl: ttl seconds (0 = keep forever)
-- ARGV[6] app_member: the session's member in the app sessions zset
-- ARGV[7] layout: the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest
--   outbox id that may not be applied yet: older entries are dropped, newer ones returned
-- ARGV[8] own_ttl: '1' = ARGV[5] is this session's own ttl, kept in its metadata for every
--   append to refresh ('' = the service default, which appends pass themselves)
-- The session indexes are scored by creation time, the -by-update ones by last update
-- (appends move those).
-- ARGV[9] now_ms: the caller's clock, whole ms since the epoch: with a TTL, the session's
--   metadata keeps when it expires ('expires', ARGV[9] + TTL) and so does the app's expiry
--   index (on a cluster through the outbox's index_add, 'expire' -> ms); without one, any
--   entry of a session that had this id before is dropped there
-- ARGV[10] expiry_take: (single-node layout) how many due members of the expiry index to
--   claim and return
-- ARGV[11]... state_fields: the numbers of session, user and app fields (ARGV[11], [12],
--   [13]), then that many field/JSON pairs of each, in that order
-- returns {1, user state as field/value list, app state as field/value list, due} when
--         created (due: the expiry index's members claimed, see expiry_due in _expiry.lua)
--         ({1, user state, outbox entries from the layout's id on} in the cluster layout, where the
--         app index entry and app fields are recorded in the outbox for the caller to apply),
--         {0} when the session exists ({0, outbox entries from the layout's id on} in the cluster
--         layout), {-3, key, found type} when a key has a foreign type, {-4, command, key}
--         when the ACL user may not run a command it needs (nothing written)
local cluster, unapplied = layout(ARGV[7])
local refused = denied_each('TYPE', KEYS)
  or denied('EXISTS', KEYS[1], 'EXISTS', KEYS[2], 'EXISTS', KEYS[3], 'EXISTS', KEYS[4],
    'DEL', KEYS[2], 'DEL', KEYS[3], 'DEL', KEYS[4], 'HSET', KEYS[1], 'HSET', KEYS[2],
    'HSET', KEYS[5], 'ZADD', KEYS[6], 'ZADD', KEYS[7], 'HGETALL', KEYS[5])
  or (cluster and denied('XADD', KEYS[8], 'XTRIM', KEYS[8], 'XRANGE', KEYS[8]))
  or (not cluster and denied('HSET', KEYS[8], 'HGETALL', KEYS[8], 'ZADD', KEYS[9],
    'ZADD', KEYS[10], 'ZADD', KEYS[11], 'ZREM', KEYS[11], 'ZRANGE', KEYS[11]))
  or (tonumber(ARGV[5]) > 0 and denied('EXPIRE', KEYS[1], 'EXPIRE', KEYS[2]))
if refused then return refused end

local expected = {'hash', 'hash', 'stream', 'hash', 'hash', 'zset', 'zset', 'hash', 'zset', 'zset',
  'zset'}
if cluster then expected = {'hash', 'hash', 'stream', 'hash', 'hash', 'zset', 'zset', 'stream'} end
for i, want in ipairs(expected) do
  local t = redis.call('TYPE', KEYS[i])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- A retried create whose app step failed must still finish it.
  if cluster then return {0, redis.call('XRANGE', KEYS[8], unapplied, '+')} end
  return {0}
end

-- Leftovers of an expired or hand-deleted session must not reappear under the new one.
-- Only when there are any: at full memory Redis refuses a script's first write only if it
-- may grow memory, and lets the rest through; a DEL first would let a create past the limit.
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) > 0 then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
end

local ttl = tonumber(ARGV[5])
local expires = ttl > 0 and expires_at(ARGV[9], ttl)
local counts = {tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])}
local pos = 14
for scope, target in ipairs({KEYS[2], KEYS[5], KEYS[8]}) do
  if cluster and scope == 3 then
    -- The app's slot is elsewhere: its index entry and app fields go to the outbox, in
    -- entries of at most 1000 fields (unpack() is bounded by the Lua stack).
    local entry = {'index_add', ARGV[6], 'score', ARGV[4]}
    if expires then
      entry[5] = 'expire'
      entry[6] = expires
    end
    for _ = 1, counts[3] do
      entry[#entry + 1] = 'app:' .. ARGV[pos]
      entry[#entry + 1] = ARGV[pos + 1]
      pos = pos + 2
      if #entry >= 2000 then
        redis.call('XADD', target, '*', unpack(entry))
        entry = {}
      end
    end
    if #entry > 0 then redis.call('XADD', target, '*', unpack(entry)) end
  else
    for _ = 1, counts[scope] do
      redis.call('HSET', target, ARGV[pos], ARGV[pos + 1])
      pos = pos + 2
    end
  end
end

redis.call('HSET', KEYS[1], 'id', ARGV[1], 'app_name', ARGV[2], 'user_id', ARGV[3],
  'rev', 0, 'create_time', ARGV[4], 'last_update_time', ARGV[4], 'last_event_id', '')
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'ttl', ARGV[5]) end
-- A state hash is never emptied once written: its absence then means it was evicted.
if counts[1] > 0 then redis.call('HSET', KEYS[1], 'has_state', 1) end
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[7], ARGV[4], ARGV[1])
if expires then
  redis.call('HSET', KEYS[1], 'expires', expires)
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
if cluster then
  redis.call('XTRIM', KEYS[8], 'MINID', unapplied)
  return {1, redis.call('HGETALL', KEYS[5]), redis.call('XRANGE', KEYS[8], unapplied, '+')}
end
redis.call('ZADD', KEYS[9], ARGV[4], ARGV[6])
redis.call('ZADD', KEYS[10], ARGV[4], ARGV[6])
-- A session that had this id before and expired must not be taken for this one.
if expires then
  redis.call('ZADD', KEYS[11], expires, ARGV[6])
else
  redis.call('ZREM', KEYS[11], ARGV[6])
end
local due = expiry_due(KEYS[11], ARGV[9], tonumber(ARGV[10]))
return {1, redis.call('HGETALL', KEYS[5]), redis.call('HGETALL', KEYS[8]), due}
