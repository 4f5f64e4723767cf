-- Records a request for background generation in the shard of its (app, user): a new job,
-- one merged into the job already waiting for the session (coalesced), or a deferred one
-- (its trigger not reached yet). The job's options are the newest request's: requests that
-- coalesce into one generation write what the last of them asked for (labels, metadata).
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] queued: the queued zset
-- KEYS[3] active: the active zset
-- KEYS[4] again: the again zset
-- KEYS[5] due: the due zset
-- KEYS[6] users: the users zset
-- KEYS[7] marks: the marks zset
-- KEYS[8] events: the job's events list
-- KEYS[9] options: the job's options string (its newest request's)
-- ARGV[1] job: the job ('<s|e>:<user>:<session>', escaped)
-- ARGV[2] user: its user (escaped)
-- ARGV[3] now_ms: now, ms
-- ARGV[4] max_waiting: most jobs waiting (queued or deferred) in this shard
-- ARGV[5] session_events: a session job: the session's events (for the event-count trigger)
-- ARGV[6] event_trigger: the event-count trigger (0: none)
-- ARGV[7] idle_ms: the idle trigger, ms (0: none)
-- ARGV[8] max_events: most events waiting for one job
-- ARGV[9] traceparent: the request's W3C traceparent ('': none)
-- ARGV[10] request: the request's options (JSON; '': none)
-- ARGV[11]... given: events given one by one (JSON, in order)
-- returns {1} queued, {2} merged into the job waiting or running, {3} deferred,
--         {-5, waiting} the shard's backlog is full, {-7, waiting} the job's events are,
--         {-4, command, key} when the ACL user may not run a command it needs;
--         nothing is written unless the reply is 1, 2 or 3 (not -6: that is every
--         script's refusal for memory, _redis/scripts.py)
local job, user, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local trigger, idle = tonumber(ARGV[6]), tonumber(ARGV[7])
local session_job = string.sub(job, 1, 2) == 's:'
local given = #ARGV - 10
local refused = denied('ZSCORE', KEYS[2], 'ZCARD', KEYS[2], 'ZADD', KEYS[2], 'ZSCORE', KEYS[3],
  'ZSCORE', KEYS[4], 'ZADD', KEYS[4], 'ZSCORE', KEYS[5], 'ZCARD', KEYS[5], 'ZADD', KEYS[5],
  'ZREM', KEYS[5], 'ZSCORE', KEYS[6], 'ZADD', KEYS[6], 'ZSCORE', KEYS[7], 'ZADD', KEYS[7],
  'XADD', KEYS[1], 'SET', KEYS[9], 'DEL', KEYS[9])
  or (given > 0 and denied('LPUSH', KEYS[8]))
if refused then return refused end

local queued = redis.call('ZSCORE', KEYS[2], job)
local active = redis.call('ZSCORE', KEYS[3], job)
local deferred = redis.call('ZSCORE', KEYS[5], job)
if not (queued or active or deferred) then
  local waiting = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[5])
  if waiting >= tonumber(ARGV[4]) then return {-5, waiting} end
end
-- A session job's mark is its session's event count at its last job; an events job's is
-- how many of its events wait in its list.
local mark = tonumber(redis.call('ZSCORE', KEYS[7], job) or '0')
if given > 0 then
  if mark + given > tonumber(ARGV[8]) then return {-7, mark} end
  for i = 11, #ARGV, 1000 do
    redis.call('LPUSH', KEYS[8], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  mark = mark + given
  redis.call('ZADD', KEYS[7], mark, job)
end
-- A running job read its options when it started: these are for the run that follows it.
if ARGV[10] ~= '' then
  redis.call('SET', KEYS[9], ARGV[10])
else
  redis.call('DEL', KEYS[9])
end

local function opened()
  if queued or active or deferred then return end
  local open = tonumber(redis.call('ZSCORE', KEYS[6], user) or '0')
  redis.call('ZADD', KEYS[6], open + 1, user)
end

-- Waiting for a worker, it will read whatever is stored by then.
if queued then return {2} end
local due = trigger == 0 and idle == 0
if trigger > 0 then
  local count = session_job and tonumber(ARGV[5]) - mark or mark
  due = count >= trigger
end
if not due then
  -- Idle: each request puts the job off again; a count alone waits for its events (or a
  -- flush: wait_for_generation).
  redis.call('ZADD', KEYS[5], idle > 0 and now + idle or '+inf', job)
  opened()
  return {3}
end
redis.call('ZREM', KEYS[5], job)
if active then
  -- The running job may have read the session already: it runs again when it ends.
  redis.call('ZADD', KEYS[4], now, job)
  return {2}
end
if ARGV[9] ~= '' then
  redis.call('XADD', KEYS[1], '*', 'job', job, 'trace', ARGV[9])
else
  redis.call('XADD', KEYS[1], '*', 'job', job)
end
redis.call('ZADD', KEYS[2], now, job)
if session_job and trigger > 0 then redis.call('ZADD', KEYS[7], tonumber(ARGV[5]), job) end
opened()
return {1}
