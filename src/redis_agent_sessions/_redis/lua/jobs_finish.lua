-- A worker ends a job: done, failed (retried after a pause, or after the last attempt put
-- in the dead letters with its error), its session gone (dropped and counted), or released
-- (a worker stopping: queued again at once). The job is acknowledged here, after whatever
-- it applied, so a worker that dies before leaves it to be claimed again. Its options go
-- with its last run (a dead letter keeps them, for a retry).
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] queued: the queued zset
-- KEYS[3] active: the active zset
-- KEYS[4] again: the again zset
-- KEYS[5] due: the due zset
-- KEYS[6] users: the users zset
-- KEYS[7] marks: the marks zset
-- KEYS[8] tries: the tries zset
-- KEYS[9] failed: the failed zset
-- KEYS[10] dead: the dead letters stream
-- KEYS[11] dropped: the dropped count string
-- KEYS[12] events: the job's events list
-- KEYS[13] lease: the user's lease string
-- KEYS[14] options: the job's options string
-- ARGV[1] job: the job
-- ARGV[2] user: its user (escaped)
-- ARGV[3] entry: its stream entry id
-- ARGV[4] group: the consumer group
-- ARGV[5] token: the worker's token for this job
-- ARGV[6] now_ms: now, ms
-- ARGV[7] outcome: 'done' | 'failed' | 'dead' | 'gone' | 'release'
-- ARGV[8] read: done: the events it read (an events job: taken off its list; a session
--   job: the session's count, its mark for the event-count trigger; -1: none kept)
-- ARGV[9] error: failed, dead: the error
-- ARGV[10] attempts: most attempts
-- ARGV[11] retry_ms: failed: ms until it is tried again
-- ARGV[12] dead_kept: dead letters kept (approximately)
-- returns {1, outcome}: 'done', 'retry' (deferred), 'dead', 'gone' or 'released', or
--         'stale' when the entry is no longer in the stream (another worker that claimed it
--         ended it: nothing but the acknowledgement is written);
--         {-4, command, key} when the ACL user may not run a command it needs
local job, user, id, now, outcome = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[6]), ARGV[7]
local events_job = string.sub(job, 1, 2) == 'e:'
local refused = denied('XRANGE', KEYS[1], 'XACK', KEYS[1], 'XDEL', KEYS[1], 'XADD', KEYS[1], 'ZADD', KEYS[2],
  'ZSCORE', KEYS[2], 'ZREM', KEYS[3], 'ZSCORE', KEYS[3], 'ZSCORE', KEYS[4], 'ZREM', KEYS[4],
  'ZADD', KEYS[5], 'ZSCORE', KEYS[5], 'ZSCORE', KEYS[6], 'ZADD', KEYS[6], 'ZREM', KEYS[6],
  'ZSCORE', KEYS[7], 'ZADD', KEYS[7], 'ZREM', KEYS[7], 'ZSCORE', KEYS[8], 'ZADD', KEYS[8],
  'ZREM', KEYS[8], 'ZADD', KEYS[9], 'ZREM', KEYS[9], 'XADD', KEYS[10], 'GET', KEYS[11],
  'SET', KEYS[11], 'LTRIM', KEYS[12], 'GET', KEYS[13], 'DEL', KEYS[13],
  'DEL', KEYS[14])
if refused then return refused end

if #redis.call('XRANGE', KEYS[1], id, id) == 0 then
  redis.call('XACK', KEYS[1], ARGV[4], id)
  return {1, 'stale'}
end
local was_open = redis.call('ZSCORE', KEYS[2], job) or redis.call('ZSCORE', KEYS[3], job)
  or redis.call('ZSCORE', KEYS[5], job)
redis.call('XACK', KEYS[1], ARGV[4], id)
redis.call('XDEL', KEYS[1], id)
redis.call('ZREM', KEYS[3], job)
if redis.call('GET', KEYS[13]) == ARGV[5] then redis.call('DEL', KEYS[13]) end
local again = redis.call('ZSCORE', KEYS[4], job)
redis.call('ZREM', KEYS[4], job)
local requeue, said = again, outcome
if outcome == 'done' then
  redis.call('ZREM', KEYS[8], job)
  redis.call('ZREM', KEYS[9], job)
  local read = tonumber(ARGV[8])
  if events_job then
    local left = tonumber(redis.call('ZSCORE', KEYS[7], job) or '0') - read
    if read > 0 then redis.call('LTRIM', KEYS[12], 0, -read - 1) end
    if left > 0 then
      redis.call('ZADD', KEYS[7], left, job)
      requeue = true
    else
      redis.call('ZREM', KEYS[7], job)
    end
  elseif read >= 0 then
    redis.call('ZADD', KEYS[7], read, job)
  end
elseif outcome == 'gone' then
  redis.call('SET', KEYS[11], tonumber(redis.call('GET', KEYS[11]) or '0') + 1)
  redis.call('ZREM', KEYS[7], job)
  redis.call('ZREM', KEYS[8], job)
elseif outcome == 'release' then
  requeue, said = true, 'released'
else
  local tries = tonumber(redis.call('ZSCORE', KEYS[8], job) or '0')
  if outcome == 'failed' then tries = tries + 1 end
  if tries >= tonumber(ARGV[10]) or outcome == 'dead' then
    redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[12], '*', 'job', job, 'error', ARGV[9],
      'attempts', tries, 'at', ARGV[6])
    redis.call('ZREM', KEYS[8], job)
    redis.call('ZADD', KEYS[9], now, job)
    -- What was asked meanwhile is in the dead letter too: retrying it reads all.
    requeue, said = false, 'dead'
  else
    redis.call('ZADD', KEYS[8], tries, job)
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[11]), job)
    requeue, said = false, 'retry'
  end
end
-- Released before it started, the job is still queued, by this very entry: a new entry
-- takes its place, and its age.
local waiting = redis.call('ZSCORE', KEYS[2], job)
if requeue and (outcome == 'release' or not waiting) then
  redis.call('ZREM', KEYS[5], job)
  redis.call('XADD', KEYS[1], '*', 'job', job)
  redis.call('ZADD', KEYS[2], waiting or now, job)
end

local open = redis.call('ZSCORE', KEYS[2], job) or redis.call('ZSCORE', KEYS[3], job)
  or redis.call('ZSCORE', KEYS[5], job)
if not open and said ~= 'dead' then redis.call('DEL', KEYS[14]) end
if was_open and not open then
  local left = tonumber(redis.call('ZSCORE', KEYS[6], user) or '1') - 1
  if left > 0 then redis.call('ZADD', KEYS[6], left, user) else redis.call('ZREM', KEYS[6], user) end
elseif open and not was_open then
  redis.call('ZADD', KEYS[6], tonumber(redis.call('ZSCORE', KEYS[6], user) or '0') + 1, user)
end
return {1, said}
