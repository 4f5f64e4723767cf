-- A worker starts a job it read from the stream: it takes the user's lease (so that no two
-- workers generate for one user at once), marks the job active and gets its events and
-- options.
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] queued: the queued zset
-- KEYS[3] active: the active zset
-- KEYS[4] tries: the tries zset
-- KEYS[5] lease: the user's lease string
-- KEYS[6] events: the job's events list
-- KEYS[7] options: the job's options string
-- ARGV[1] job: the job
-- ARGV[2] entry: its stream entry id
-- ARGV[3] token: the worker's token for this job
-- ARGV[4] lease_ms: the lease's time to live, ms
-- ARGV[5] now_ms: now, ms
-- ARGV[6] max_events: most events to read
-- ARGV[7] claimed: '1' when the entry was claimed from a worker that stopped answering (an
--   attempt)
-- returns {1, failed attempts, ms it was queued at ('' when it was not: claimed, or
--         asked for again while it ran), its options ('': none), event JSON, ...} started
--         (events oldest first),
--         {0, holder} another job holds the user's lease (nothing written),
--         {-1} the entry is gone (finished or released meanwhile: nothing to do),
--         {-4, command, key} when the ACL user may not run a command it needs
local job, id, token = ARGV[1], ARGV[2], ARGV[3]
local refused = denied('XRANGE', KEYS[1], 'GET', KEYS[5], 'SET', KEYS[5], 'ZSCORE', KEYS[2],
  'ZREM', KEYS[2], 'ZADD', KEYS[3], 'ZSCORE', KEYS[4], 'ZADD', KEYS[4], 'LRANGE', KEYS[6],
  'GET', KEYS[7])
if refused then return refused end

if #redis.call('XRANGE', KEYS[1], id, id) == 0 then return {-1} end
local holder = redis.call('GET', KEYS[5])
if holder and holder ~= token then return {0, holder} end
redis.call('SET', KEYS[5], token, 'PX', ARGV[4])
local queued = redis.call('ZSCORE', KEYS[2], job) or ''
redis.call('ZREM', KEYS[2], job)
redis.call('ZADD', KEYS[3], ARGV[5], job)
local tries = tonumber(redis.call('ZSCORE', KEYS[4], job) or '0')
if ARGV[7] == '1' and holder ~= token then
  tries = tries + 1
  redis.call('ZADD', KEYS[4], tries, job)
end
local reply = {1, tries, queued, redis.call('GET', KEYS[7]) or ''}
if string.sub(job, 1, 2) == 'e:' then
  -- The list is newest first: its oldest events are at its end.
  local events = redis.call('LRANGE', KEYS[6], -tonumber(ARGV[6]), -1)
  for i = #events, 1, -1 do reply[#reply + 1] = events[i] end
end
return reply
