-- Appends one event and applies its state delta to every scope, as one atomic step.
-- KEYS[1] session meta hash      KEYS[2] session state hash   KEYS[3] events stream
-- KEYS[4] event ids hash         KEYS[5] user state hash      KEYS[6] user sessions zset
-- KEYS[7] app state hash         KEYS[8] app sessions zset
-- ARGV[1] revision the writer read ('' = unknown: compare ARGV[2] with the last event id)
-- ARGV[2] id of the last event the writer has ('' = none)
-- ARGV[3] 'reject' (stale writers fail) or 'merge' (stale writers apply, last writer wins)
-- ARGV[4] event id   ARGV[5] event JSON   ARGV[6] event time, whole ms since the epoch
-- ARGV[7] last_update_time (float text)   ARGV[8] ttl seconds (0 = keep forever)
-- ARGV[9] session id   ARGV[10] member in the app sessions zset
-- ARGV[11..13] number of session, user and app fields, then that many field/JSON pairs
-- returns {1, new revision, stream id} appended, {2, revision the event produced} already
--         stored (a retry), {-1} no such session, {-2, current revision} stale writer,
--         {-3, key, found type} when a key has a foreign type. Only status 1 writes.
local expected = {'hash', 'hash', 'stream', 'hash', 'hash', 'zset', 'hash', 'zset'}
for i, want in ipairs(expected) do
  local t = redis.call('TYPE', KEYS[i])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
end
local meta = redis.call('HMGET', KEYS[1], 'rev', 'last_event_id')
if not meta[1] then return {-1} end
local rev = tonumber(meta[1])

local seen = redis.call('HGET', KEYS[4], ARGV[4])
if seen then return {2, tonumber(seen)} end

if ARGV[3] == 'reject' then
  if ARGV[1] ~= '' then
    if ARGV[1] ~= meta[1] then return {-2, rev} end
  elseif ARGV[2] ~= (meta[2] or '') then
    return {-2, rev}
  end
end

-- Stream ids follow event time but never go backwards, whatever the writers' clocks say.
local ms = ARGV[6]
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #last > 0 then
  local last_ms = string.match(last[1][1], '^(%d+)-')
  if tonumber(last_ms) > tonumber(ms) then ms = last_ms end
end
local stream_id = redis.call('XADD', KEYS[3], ms .. '-*', 'event', ARGV[5])

local counts = {tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])}
local targets = {KEYS[2], KEYS[5], KEYS[7]}
local pos = 14
for scope = 1, 3 do
  for _ = 1, counts[scope] do
    redis.call('HSET', targets[scope], ARGV[pos], ARGV[pos + 1])
    pos = pos + 2
  end
end

rev = rev + 1
redis.call('HSET', KEYS[1], 'rev', rev, 'last_update_time', ARGV[7], 'last_event_id', ARGV[4])
redis.call('HSET', KEYS[4], ARGV[4], rev)
redis.call('ZADD', KEYS[6], ARGV[7], ARGV[9])
redis.call('ZADD', KEYS[8], ARGV[7], ARGV[10])
local ttl = tonumber(ARGV[8])
if ttl > 0 then
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
end
return {1, rev, stream_id}
