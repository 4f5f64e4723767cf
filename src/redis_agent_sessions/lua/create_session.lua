-- Creates a session unless its id is taken, and writes its initial state in every scope.
-- Nothing is written when the session exists, so a failed duplicate create has no side effect.
-- KEYS[1] session meta hash      KEYS[2] session state hash   KEYS[3] events stream
-- KEYS[4] event ids hash         KEYS[5] user state hash      KEYS[6] user sessions zset
-- KEYS[7] app state hash         KEYS[8] app sessions zset
-- ARGV[1] session id   ARGV[2] app_name   ARGV[3] user_id   ARGV[4] create time (float text)
-- ARGV[5] ttl seconds (0 = keep forever)  ARGV[6] member in the app sessions zset
-- Both session indexes are scored by creation time and never touched by appends.
-- ARGV[7..9] number of session, user and app fields, then that many field/JSON pairs in order
-- returns {1, user state as field/value list, app state as field/value list} when created,
--         {0} when the session exists, {-3, key, found type} when a key has a foreign type
local expected = {'hash', 'hash', 'stream', 'hash', 'hash', 'zset', 'hash', 'zset'}
for i, want in ipairs(expected) do
  local t = redis.call('TYPE', KEYS[i])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end

-- Leftovers of an expired or hand-deleted session must not reappear under the new one.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])

local counts = {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}
local targets = {KEYS[2], KEYS[5], KEYS[7]}
local pos = 10
for scope = 1, 3 do
  for _ = 1, counts[scope] do
    redis.call('HSET', targets[scope], ARGV[pos], ARGV[pos + 1])
    pos = pos + 2
  end
end

redis.call('HSET', KEYS[1], 'id', ARGV[1], 'app_name', ARGV[2], 'user_id', ARGV[3],
  'rev', 0, 'create_time', ARGV[4], 'last_update_time', ARGV[4], 'last_event_id', '')
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[8], ARGV[4], ARGV[6])
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
return {1, redis.call('HGETALL', KEYS[5]), redis.call('HGETALL', KEYS[7])}
