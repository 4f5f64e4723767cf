-- Cluster layout: the registry of users whose app-scope writes may wait, unapplied, in their
-- outbox (sessions/_sweep.py), a zset in the app's slot: escaped user id -> ms time of the
-- user's latest registration. Workers register a user before a user-slot script that records
-- app-scope writes; the sweep applies what registered users left pending, then clears them.
-- uses: _permitted
-- KEYS[1] registry: the app's registry zset
-- ARGV[1] operation: what to do, with its operands (ARGV[2] on):
--   'add', member, now (ms): registers the user at `now`, or just after its current score
--     when that is not older (a slower clock): every registration changes the score, and
--     none makes the user look older. Returns {new score, previous score ('' = none)}
--   'undo', member, score, previous: the registration that gave `score` was not needed (its
--     operation was refused before writing): if the score is still `score`, puts `previous`
--     back (removes the member when ''). Returns 1 if it did, else 0
--   'due', before (ms), count: the `count` oldest members scored below `before`, as
--     {member, score, ...}
--   'clear', member, score, ...: removes each member whose score is still the one given (a
--     re-registration since keeps it). Returns how many it removed
-- ARGV[2]... operands: the operation's, as above
-- returns {-3, key, found type} when KEYS[1] has a foreign type, {-4, command, key} when the
--   ACL user may not run a command it needs (nothing written either way)
local op, key = ARGV[1], KEYS[1]
local refused = nil
if op == 'add' then
  refused = denied('TYPE', key, 'ZSCORE', key, 'ZADD', key)
elseif op == 'undo' then
  refused = denied('TYPE', key, 'ZSCORE', key, 'ZADD', key, 'ZREM', key)
elseif op == 'due' then
  refused = denied('TYPE', key, 'ZRANGE', key)
elseif op == 'clear' then
  refused = denied('TYPE', key, 'ZSCORE', key, 'ZREM', key)
else
  return error('ERR unknown registry operation: ' .. tostring(op))
end
if refused then return refused end

local t = redis.call('TYPE', key)
if type(t) == 'table' then t = t['ok'] end
if t ~= 'none' and t ~= 'zset' then return {-3, key, t} end

if op == 'add' then
  local member, score = ARGV[2], tonumber(ARGV[3])
  local previous = redis.call('ZSCORE', key, member)
  if previous and tonumber(previous) >= score then score = tonumber(previous) + 0.001 end
  redis.call('ZADD', key, score, member)
  return {redis.call('ZSCORE', key, member), previous or ''}
elseif op == 'undo' then
  local member, previous = ARGV[2], ARGV[4]
  local current = redis.call('ZSCORE', key, member)
  if not current or tonumber(current) ~= tonumber(ARGV[3]) then return 0 end
  if previous == '' then
    redis.call('ZREM', key, member)
  else
    redis.call('ZADD', key, previous, member)
  end
  return 1
elseif op == 'due' then
  return redis.call('ZRANGE', key, '-inf', '(' .. ARGV[2], 'BYSCORE', 'LIMIT', 0,
    tonumber(ARGV[3]), 'WITHSCORES')
end
local removed = 0
for i = 2, #ARGV, 2 do
  local current = redis.call('ZSCORE', key, ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', key, ARGV[i])
  end
end
return removed
