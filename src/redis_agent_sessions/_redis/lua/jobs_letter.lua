-- An operator's answer to a dead letter: retry its job (queued again, its attempts counted
-- afresh) or drop it.
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] queued: the queued zset
-- KEYS[3] active: the active zset
-- KEYS[4] again: the again zset
-- KEYS[5] due: the due zset
-- KEYS[6] users: the users zset
-- KEYS[7] failed: the failed zset
-- KEYS[8] dead: the dead letters stream
-- KEYS[9] marks: the marks zset
-- KEYS[10] events: the job's events list
-- KEYS[11] options: the job's options string
-- ARGV[1] entry: the dead letter's entry id
-- ARGV[2] action: 'retry' | 'drop'
-- ARGV[3] now_ms: now, ms
-- ARGV[4] job: its job, as read before (the events list is that job's)
-- returns {1, job} done, {0} no such dead letter (or one of another job),
--         {-4, command, key} when the ACL user may not run a command it needs
local id, now = ARGV[1], tonumber(ARGV[3])
local refused = denied('XRANGE', KEYS[8], 'XDEL', KEYS[8], 'ZREM', KEYS[7])
  or (ARGV[2] == 'drop' and denied('ZSCORE', KEYS[2], 'ZSCORE', KEYS[3], 'ZSCORE', KEYS[5],
    'ZREM', KEYS[9], 'DEL', KEYS[10], 'DEL', KEYS[11]))
  or (ARGV[2] == 'retry' and denied('ZSCORE', KEYS[2], 'ZADD', KEYS[2], 'ZSCORE', KEYS[3],
    'ZADD', KEYS[4], 'ZSCORE', KEYS[5], 'ZREM', KEYS[5], 'ZSCORE', KEYS[6], 'ZADD', KEYS[6],
    'XADD', KEYS[1]))
if refused then return refused end

local found = redis.call('XRANGE', KEYS[8], id, id)
if #found == 0 then return {0} end
local fields, job = found[1][2], nil
for i = 1, #fields, 2 do
  if fields[i] == 'job' then job = fields[i + 1] end
end
if job ~= ARGV[4] then return {0} end
redis.call('XDEL', KEYS[8], id)
redis.call('ZREM', KEYS[7], job)
if ARGV[2] ~= 'retry' then
  -- Its events wait for no job now, unless one is open for them.
  local open = redis.call('ZSCORE', KEYS[2], job) or redis.call('ZSCORE', KEYS[3], job)
    or redis.call('ZSCORE', KEYS[5], job)
  if string.sub(job, 1, 2) == 'e:' and not open then
    redis.call('DEL', KEYS[10])
    redis.call('ZREM', KEYS[9], job)
  end
  if not open then redis.call('DEL', KEYS[11]) end
  return {1, job}
end

local queued = redis.call('ZSCORE', KEYS[2], job)
local active = redis.call('ZSCORE', KEYS[3], job)
local deferred = redis.call('ZSCORE', KEYS[5], job)
if active then
  redis.call('ZADD', KEYS[4], now, job)
elseif not queued then
  redis.call('ZREM', KEYS[5], job)
  redis.call('XADD', KEYS[1], '*', 'job', job)
  redis.call('ZADD', KEYS[2], now, job)
end
if not (queued or active or deferred) then
  local user = string.match(job, '^%a:([^:]*):')
  redis.call('ZADD', KEYS[6], tonumber(redis.call('ZSCORE', KEYS[6], user) or '0') + 1, user)
end
return {1, job}
