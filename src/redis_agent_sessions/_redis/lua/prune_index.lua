-- Drops index entries of sessions that no longer exist (expired by TTL or deleted by hand).
-- Each session is re-checked here, so one re-created since the caller looked is kept; a kept
-- one that is in the app's expiry index is due there again when its metadata says it expires
-- (when that has passed, in EXPIRY_SOON_MS or as long as it has outlived it, at most
-- EXPIRY_RECHECK_MS, _expiry.lua; in EXPIRY_RECHECK_MS when it is not known).
-- uses: _permitted, _layout, _expiry
-- KEYS[1] app_sessions: the app's sessions zset, or (cluster layout) the user's app outbox
--   stream
-- KEYS[2] app_updated: the app's sessions-by-update zset (single node only)
-- KEYS[3] app_expiry: the app's expiry index (single node only)
-- KEYS[4]... session_keys: for each session, its meta hash, its user sessions zset and its
--   user sessions-by-update zset (all of one user in the cluster layout, where they start
--   at KEYS[2])
-- ARGV[1] layout: the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest
--   outbox id that may not be applied yet: older entries are dropped, newer ones returned
-- ARGV[2] now_ms: the caller's clock, whole ms since the epoch
-- ARGV[3]... sessions: for each session, in the same order: its session id and its app
--   sessions member
-- returns {dropped, outbox}: the number of sessions dropped from the indexes, and (cluster
--         layout) the outbox entries from the layout's id on, app index removals
--         (index_rem) and the kept sessions' expiry index updates (index_expire, 'expire' ->
--         ms) among them; {-3, key, found type} when an app index has a foreign type,
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written either way)
local cluster, unapplied = layout(ARGV[1])
local first = cluster and 2 or 4
local refused = nil
for i = first, #KEYS, 3 do
  refused = refused or denied('EXISTS', KEYS[i], 'HGET', KEYS[i], 'ZREM', KEYS[i + 1],
    'ZREM', KEYS[i + 2])
end
refused = refused
  or (cluster and denied('TYPE', KEYS[1], 'XADD', KEYS[1], 'XTRIM', KEYS[1], 'XRANGE', KEYS[1]))
  or (not cluster and denied('TYPE', KEYS[1], 'ZREM', KEYS[1], 'TYPE', KEYS[2], 'ZREM', KEYS[2],
    'TYPE', KEYS[3], 'ZREM', KEYS[3], 'ZADD', KEYS[3]))
if refused then return refused end
for i = 1, first - 1 do
  local want = cluster and 'stream' or 'zset'
  local t = redis.call('TYPE', KEYS[i])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
end
local now = tonumber(ARGV[2])
local dropped = 0
for i = 0, (#KEYS - first + 1) / 3 - 1 do
  local meta, user_index = KEYS[first + 3 * i], KEYS[first + 1 + 3 * i]
  local user_updated = KEYS[first + 2 + 3 * i]
  local session, member = ARGV[3 + 2 * i], ARGV[4 + 2 * i]
  if redis.call('EXISTS', meta) == 0 then
    redis.call('ZREM', user_index, session)
    redis.call('ZREM', user_updated, session)
    if cluster then
      redis.call('XADD', KEYS[1], '*', 'index_rem', member)
    else
      redis.call('ZREM', KEYS[1], member)
      redis.call('ZREM', KEYS[2], member)
      redis.call('ZREM', KEYS[3], member)
    end
    dropped = dropped + 1
  else
    -- A metadata hash of a foreign type has no expiry to tell: checked again later.
    local expires = tonumber(redis.pcall('HGET', meta, 'expires'))
    local due = expires
    if not expires then
      due = now + EXPIRY_RECHECK_MS
    elseif expires <= now then
      -- Alive past its time. Mostly it is expiring this instant: Redis's deadline runs from
      -- when the write's script ran, its time from the writer's clock reading before that,
      -- and a busy worker is late to send. Else a writer's clock runs behind, or a TTL was
      -- removed by hand: checked again after as long as it has outlived its time, so a
      -- few checks cover any skew, and one a minute the session that never expires.
      due = now + math.min(EXPIRY_RECHECK_MS, math.max(EXPIRY_SOON_MS, now - expires))
    end
    due = string.format('%.0f', due)
    -- XX: only a session the index holds (one re-created without a TTL is not there).
    if cluster then
      redis.call('XADD', KEYS[1], '*', 'index_expire', member, 'expire', due)
    else
      redis.call('ZADD', KEYS[3], 'XX', due, member)
    end
  end
end
if not cluster then return {dropped, {}} end
redis.call('XTRIM', KEYS[1], 'MINID', unapplied)
return {dropped, redis.call('XRANGE', KEYS[1], unapplied, '+')}
