-- Moves deferred jobs whose time has come (an idle trigger, a retry's pause) into the
-- stream; or, flushing, those of one session or user whatever their time
-- (wait_for_generation).
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] queued: the queued zset
-- KEYS[3] active: the active zset
-- KEYS[4] again: the again zset
-- KEYS[5] due: the due zset
-- ARGV[1] now_ms: now, ms
-- ARGV[2] limit: most jobs moved
-- ARGV[3]... flushing: the jobs to move, or one '<user>:' (escaped) for all of its jobs;
--   none: those whose time has come
-- returns {moved}, or {-4, command, key} when the ACL user may not run a command it needs
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local refused = denied('ZRANGE', KEYS[5], 'ZREM', KEYS[5], 'ZSCORE', KEYS[2], 'ZADD', KEYS[2],
  'ZSCORE', KEYS[3], 'ZADD', KEYS[4], 'XADD', KEYS[1])
if refused then return refused end

local jobs = {}
if #ARGV == 2 then
  jobs = redis.call('ZRANGE', KEYS[5], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
elseif string.sub(ARGV[3], -1) == ':' and #ARGV == 3 then
  -- A user's jobs: '<kind>:<user>:<session>', the user escaped (it holds no ':').
  jobs = {}
  for _, job in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    if string.sub(job, 3, 2 + #ARGV[3]) == ARGV[3] then jobs[#jobs + 1] = job end
  end
else
  jobs = {}
  for i = 3, #ARGV do
    if redis.call('ZSCORE', KEYS[5], ARGV[i]) then jobs[#jobs + 1] = ARGV[i] end
  end
end
-- A deferred job stays open as it moves (queued, or asked again while active): the users'
-- counts of open jobs do not change.
for _, job in ipairs(jobs) do
  redis.call('ZREM', KEYS[5], job)
  if redis.call('ZSCORE', KEYS[2], job) then
    -- already waiting for a worker
  elseif redis.call('ZSCORE', KEYS[3], job) then
    redis.call('ZADD', KEYS[4], now, job)
  else
    redis.call('XADD', KEYS[1], '*', 'job', job)
    redis.call('ZADD', KEYS[2], now, job)
  end
end
return {#jobs}
