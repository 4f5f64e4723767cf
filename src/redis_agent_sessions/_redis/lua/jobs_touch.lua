-- A worker still holding a job says so: the entry's idle time starts again (so no other
-- worker claims it) and the user's lease lives on, when this job holds it.
-- uses: _permitted
-- KEYS[1] jobs: the jobs stream
-- KEYS[2] lease: the user's lease string
-- ARGV[1] group: the consumer group
-- ARGV[2] consumer: the consumer
-- ARGV[3] entry: the entry id
-- ARGV[4] token: the worker's token for this job
-- ARGV[5] lease_ms: the lease's time to live, ms
-- returns {1} when the job holds the lease, {0} when not (not started yet, or the lease
--         lapsed: a job goes on, the compare-and-set keeps what it applies right),
--         {-1} when the entry is no longer this consumer's (another worker claimed it:
--         nothing written), {-4, command, key} when the ACL user may not run a command it
--         needs
local refused = denied('XPENDING', KEYS[1], 'XCLAIM', KEYS[1], 'GET', KEYS[2], 'SET', KEYS[2])
if refused then return refused end
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #held == 0 or held[1][2] ~= ARGV[2] then return {-1} end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[4] then return {0} end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
return {1}
