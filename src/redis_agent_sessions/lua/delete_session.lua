-- Deletes a session, its events and its index entries; user and app state stay.
-- KEYS[1] session meta hash   KEYS[2] session state hash   KEYS[3] events stream
-- KEYS[4] event ids hash      KEYS[5] user sessions zset   KEYS[6] app sessions zset
-- ARGV[1] session id   ARGV[2] member in the app sessions zset
-- returns 1 when something was deleted, 0 when there was nothing,
--         {-3, key, found type} when an index has a foreign type (nothing deleted)
for i, key in ipairs({KEYS[5], KEYS[6]}) do
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= 'zset' then return {-3, key, t} end
end
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
n = n + redis.call('ZREM', KEYS[5], ARGV[1]) + redis.call('ZREM', KEYS[6], ARGV[2])
if n > 0 then return 1 end
return 0
