-- Drops index entries of sessions that no longer exist (expired by TTL or deleted by hand).
-- Each session is re-checked here, so one re-created since the caller looked is kept.
-- KEYS[1] app sessions zset, then for each session: its meta hash and its user sessions zset
-- ARGV for each session, in the same order: its session id and its app sessions member
-- returns the number of sessions dropped from the indexes
local dropped = 0
for i = 0, (#KEYS - 1) / 2 - 1 do
  local meta, user_index = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  if redis.call('EXISTS', meta) == 0 then
    redis.call('ZREM', user_index, ARGV[1 + 2 * i])
    redis.call('ZREM', KEYS[1], ARGV[2 + 2 * i])
    dropped = dropped + 1
  end
end
return dropped
