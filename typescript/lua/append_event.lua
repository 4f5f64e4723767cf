-- Appends one event and applies its state delta to every scope, as one atomic step.
-- uses: _permitted, _layout, _expiry
-- KEYS[1] meta: the session's metadata hash
-- KEYS[2] state: the session state hash
-- KEYS[3] events: the events stream
-- KEYS[4] event_ids: the event ids hash
-- KEYS[5] user_state: the user state hash
-- KEYS[6] app_state: the app state hash, or (cluster layout) the user's app outbox stream
-- KEYS[7] user_updated: the user's sessions-by-update zset
-- KEYS[8] compactions: the compactions zset (see ARGV[12])
-- KEYS[9] app_updated: the app's sessions-by-update zset (single node only)
-- KEYS[10] app_expiry: the app's expiry index (_expiry.lua; single node only)
-- ARGV[1] revision: the revision the writer read ('' = unknown: compare ARGV[2] with the
--   last event id)
-- ARGV[2] last_event_id: id of the last event the writer has ('' = none)
-- ARGV[3] stale_policy: 'reject' (stale writers fail) or 'merge' (stale writers apply, last
--   writer wins)
-- ARGV[4] event_id: the event's id
-- ARGV[5] event: the event's JSON
-- ARGV[6] event_ms: the event's time, whole ms since the epoch
-- ARGV[7] update_time: the new last_update_time (float text)
-- ARGV[8] ttl: ttl seconds (0 = keep forever), unless the session's metadata has its own
--   'ttl' (given at create time), which wins
-- ARGV[9] layout: the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest
--   outbox id that may not be applied yet: older entries are dropped, newer ones returned
-- ARGV[10] session_id: the session's id (its member in the user's index)
-- ARGV[11] app_member: its member in the app-wide index ('<user>:<session>', escaped)
-- ARGV[12] compaction: '' or, for an event carrying a compaction summary, '<start> <end>'
--   (its range of event times, float text): the entry is indexed in KEYS[8] (member
--   '<stream id> <start> <end>', scored by start) and the entries whose ranges it contains
--   are dropped, so compaction-aware reads find the summaries that count without a scan
-- ARGV[13] full_reads: '' or why this session's reads must always be full ('rewind',
--   'interrupt', ...; the caller's view of the event). The script adds 'clock' when the
--   event's time is older than the newest stream id (stream ids then stop being event
--   times) and 'compaction' when a summary's range ends after the summary's own entry. The
--   first reason is kept in the metadata as 'full_reads'.
-- ARGV[14] catch_up_limit: a stale writer that is at most this many events behind gets what
--   it lacks with its refusal (see {-2 ...} below); 0 = never
-- ARGV[15] catch_up_now: '' or '1': an appended event's reply carries the catch-up too
--   (other writers of this worker hold copies at the writer's old revision and wait their
--   turn)
-- ARGV[16] now_ms: the caller's clock, whole ms since the epoch: when the session expires
--   (it has a TTL), the metadata keeps when ('expires', ARGV[16] + TTL), and on a single
--   node so does the app's expiry index (on a cluster that is in another slot: see
--   sessions/_cluster.py)
-- ARGV[17] expiry_take: (single-node layout) how many due members of the expiry index to
--   claim and return
-- ARGV[18] schema: '' or the fingerprint of the model classes that wrote ARGV[5], stored
--   beside it (field 'schema'): a reader with the same classes may rebuild the event
--   without validating it again (sessions/_trusted.py)
-- ARGV[19]... state_fields: the numbers of session, user and app fields (ARGV[19], [20],
--   [21]), then that many field/JSON pairs of each, in that order
-- The by-update indexes get the new last_update_time; the others are scored by creation.
-- returns {1, new revision, stream id, after, catch-up if ARGV[15]} appended, where after is
--         the outbox on a cluster and, on a single node, the expiry index's due members that
--         this call claimed (see expiry_due in _expiry.lua),
--         {2, revision the event produced, '', outbox} already stored (a retry),
--         {-1} no such session, {-2, current revision, catch-up} stale writer,
--         {-3, key, found type} when a key has a foreign type, {-4, command, key} when the
--         ACL user may not run a command it needs, {-5, meta key, what is missing...} when
--         the session's keys were evicted apart (its metadata remains, its events, event ids
--         or session state do not: see 'has_state'), {-6, error} when Redis refuses the
--         first write for memory (maxmemory under noeviction). Only status 1 changes data (besides
--         dropping applied outbox entries; status 2 re-writes the revision as it is, so
--         that a WAIT after a retry covers the original write, which a retry that wrote
--         nothing would not: WAIT counts the connection's own writes).
--         outbox (cluster layout only): the entries from the layout's id on, as XRANGE returns
--         them, for the caller to apply to the app's slot; app fields are recorded there
--         as "app:<field>" -> JSON.
--         catch-up (single-node layout, ARGV[1] set, at most ARGV[14] events behind, reads
--         permitted; else absent): what refresh would read for a copy at revision ARGV[1]
--         with newest event ARGV[2], so that refreshing such a copy needs no read of its
--         own: meta, session, user and app state (HGETALL replies), the event_ids value of
--         ARGV[2] (false if none), and the entries from that event on (from the first if
--         ARGV[2] is ''), as XRANGE returns them.

-- Nothing may fail after the first write (Redis does not roll scripts back), so every key
-- written after it is known to have the right type first. The reads below check KEYS[1]
-- and KEYS[4]; XADD to KEYS[3] is the first write; state hashes are checked when written.
local cluster, unapplied = layout(ARGV[9])
local refused = denied('HMGET', KEYS[1], 'HGET', KEYS[4], 'XREVRANGE', KEYS[3], 'XADD', KEYS[3],
    'HSET', KEYS[1], 'HSET', KEYS[4], 'TYPE', KEYS[7], 'ZADD', KEYS[7])
  or denied_keys('EXISTS', KEYS[2], KEYS[3], KEYS[4])
  or (ARGV[19] ~= '0' and denied('TYPE', KEYS[2], 'HSET', KEYS[2]))
  or (ARGV[20] ~= '0' and denied('TYPE', KEYS[5], 'HSET', KEYS[5]))
  or (cluster and denied('TYPE', KEYS[6], 'XADD', KEYS[6], 'XTRIM', KEYS[6], 'XRANGE', KEYS[6]))
  or (not cluster and ARGV[21] ~= '0' and denied('TYPE', KEYS[6], 'HSET', KEYS[6]))
  or (not cluster and denied('TYPE', KEYS[9], 'ZADD', KEYS[9], 'TYPE', KEYS[10],
    'ZADD', KEYS[10], 'ZRANGE', KEYS[10]))
  or (ARGV[12] ~= '' and denied('TYPE', KEYS[8], 'ZADD', KEYS[8], 'ZRANGE', KEYS[8],
    'ZREM', KEYS[8]))
-- Whether the session expires is known only once its metadata is read: asked then, only
-- for a session that expires (a read changes nothing), before the first write.
local function expire_refused()
  return denied('EXPIRE', KEYS[1], 'EXPIRE', KEYS[2], 'EXPIRE', KEYS[3], 'EXPIRE', KEYS[4],
    'EXPIRE', KEYS[8])
end
-- The catch-up's reads (see catch_up below) are asked only when a catch-up is due; when
-- refused there is no catch-up, and no error.
local function catch_up_refused()
  return denied('HGETALL', KEYS[1], 'HGETALL', KEYS[2], 'HGETALL', KEYS[5], 'HGETALL', KEYS[6],
    'XRANGE', KEYS[3])
end
if refused then return refused end

local has_outbox = false
local state_type = nil -- KEYS[2]'s, when this append writes it
for scope, i in ipairs({2, 5, 6}) do
  local want = (cluster and i == 6) and 'stream' or 'hash'
  if ARGV[18 + scope] ~= '0' or (cluster and i == 6) then
    local t = redis.call('TYPE', KEYS[i])['ok']
    if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
    if i == 2 then state_type = t end
    if cluster and i == 6 then has_outbox = t ~= 'none' or ARGV[21] ~= '0' end
  end
end
-- The by-update indexes (7, and 9 on a single node, with the expiry index 10), and the
-- compactions zset (8) when this event is a summary; a numeric loop, as this runs on every
-- append.
for i = 7, cluster and 7 or 10 do
  if i ~= 8 then
    local t = redis.call('TYPE', KEYS[i])['ok']
    if t ~= 'none' and t ~= 'zset' then return {-3, KEYS[i], t} end
  end
end
if ARGV[12] ~= '' then
  local t = redis.call('TYPE', KEYS[8])['ok']
  if t ~= 'none' and t ~= 'zset' then return {-3, KEYS[8], t} end
end
-- Entries before the layout's id were applied to the app's slot (the caller read that there).
-- A user who never wrote an app key has no outbox: nothing to trim or report.
local function outbox()
  if not has_outbox then return {} end
  redis.call('XTRIM', KEYS[6], 'MINID', unapplied)
  return redis.call('XRANGE', KEYS[6], unapplied, '+')
end
local meta = redis.pcall('HMGET', KEYS[1], 'rev', 'last_event_id', 'last_ms', 'ttl', 'full_reads',
  'has_state')
if meta['err'] then return {-3, KEYS[1], 'not a hash'} end
if not meta[1] then return {-1} end
local rev = tonumber(meta[1])
-- Redis may evict a session's keys one by one (maxmemory-policy): written as if whole, such
-- a session would lose its history for good, and without its event ids a retry would be
-- stored twice. Checked before the retry check, which needs those ids: the keys that must
-- be there in one EXISTS (the session state's TYPE, read above when this append writes it,
-- says as much), and what is missing asked only when something is.
local whole = true
local state_asked = meta[6] and not state_type
if rev > 0 and state_asked then
  whole = redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) == 3
elseif rev > 0 then
  whole = redis.call('EXISTS', KEYS[3], KEYS[4]) == 2
elseif state_asked then
  whole = redis.call('EXISTS', KEYS[2]) == 1
end
if not whole or (meta[6] and state_type == 'none') then
  local lost = {}
  if rev > 0 and redis.call('EXISTS', KEYS[3]) == 0 then lost[#lost + 1] = 'events' end
  if rev > 0 and redis.call('EXISTS', KEYS[4]) == 0 then lost[#lost + 1] = 'event ids' end
  if meta[6] and redis.call('EXISTS', KEYS[2]) == 0 then lost[#lost + 1] = 'session state' end
  return {-5, KEYS[1], unpack(lost)}
end
local ttl = tonumber(meta[4] or ARGV[8])
if ttl > 0 then
  local expire = expire_refused()
  if expire then return expire end
end

local seen = redis.pcall('HGET', KEYS[4], ARGV[4])
if type(seen) == 'table' and seen['err'] then return {-3, KEYS[4], 'not a hash'} end
if seen then
  redis.call('HSET', KEYS[1], 'rev', meta[1])
  return {2, tonumber(string.match(seen, '^%d+')), '', outbox()}
end

-- A stale writer's retry would first read what it lacks: it gets that now instead, read
-- in this same atomic step (rev is the current revision when this runs). Nothing when
-- that is unsure or not permitted: the copy's refresh reads then.
local function catch_up()
  local behind = rev - (tonumber(ARGV[1]) or rev)
  if cluster or behind <= 0 or behind > tonumber(ARGV[14]) or catch_up_refused() then
    return nil
  end
  local at, from = false, '-'
  if ARGV[2] ~= '' then
    at = redis.call('HGET', KEYS[4], ARGV[2])
    if not at then return nil end
    from = string.match(at, ' (%S+)$')
  elseif ARGV[1] ~= '0' then
    return nil
  end
  local hashes = {}
  for i, key in ipairs({KEYS[1], KEYS[2], KEYS[5], KEYS[6]}) do
    local h = redis.pcall('HGETALL', key)
    if h['err'] then return nil end
    hashes[i] = h
  end
  local count = ARGV[2] ~= '' and behind + 1 or behind
  local entries = redis.call('XRANGE', KEYS[3], from, '+', 'COUNT', count)
  return {hashes[1], hashes[2], hashes[3], hashes[4], at, entries}
end

if ARGV[3] == 'reject' then
  if ARGV[1] ~= '' then
    if ARGV[1] ~= meta[1] then return {-2, rev, catch_up()} end
  elseif ARGV[2] ~= (meta[2] or '') then
    return {-2, rev}
  end
end

-- Stream ids follow event time but never go backwards, whatever the writers' clocks say.
local ms = ARGV[6]
local last_ms = meta[3]
if not last_ms then
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if #last > 0 then last_ms = string.match(last[1][1], '^(%d+)-') end
end
local full_reads = ARGV[13]
if last_ms and tonumber(last_ms) > tonumber(ms) then
  ms = last_ms
  if full_reads == '' then full_reads = 'clock' end
end
local stored = {'event', ARGV[5]}
if ARGV[18] ~= '' then stored = {'event', ARGV[5], 'schema', ARGV[18]} end
local stream_id = redis.pcall('XADD', KEYS[3], ms .. '-*', unpack(stored))
if type(stream_id) == 'table' then
  -- Redis refuses a script's first write at full memory, and only that one: nothing written.
  if string.sub(tostring(stream_id['err']), 1, 3) == 'OOM' then return {-6, stream_id['err']} end
  return {-3, KEYS[3], stream_id['err']}
end

local pos = 22
for scope, key in ipairs({KEYS[2], KEYS[5], KEYS[6]}) do
  local n = tonumber(ARGV[18 + scope])
  -- unpack() is bounded by the Lua stack, so very large deltas go in slices.
  while n > 0 do
    local take = math.min(n, 1000)
    if cluster and scope == 3 then
      -- The app hash is in another slot: record the write; the caller applies it there.
      local entry = {}
      for j = 0, take - 1 do
        entry[2 * j + 1] = 'app:' .. ARGV[pos + 2 * j]
        entry[2 * j + 2] = ARGV[pos + 2 * j + 1]
      end
      redis.call('XADD', key, '*', unpack(entry))
    else
      redis.call('HSET', key, unpack(ARGV, pos, pos + 2 * take - 1))
    end
    pos = pos + 2 * take
    n = n - take
  end
end

rev = rev + 1
if ttl > 0 then
  local expires = expires_at(ARGV[16], ttl)
  redis.call('HSET', KEYS[1], 'rev', rev, 'last_update_time', ARGV[7], 'last_event_id', ARGV[4],
    'last_ms', ms, 'expires', expires)
  if not cluster then redis.call('ZADD', KEYS[10], expires, ARGV[11]) end
else
  redis.call('HSET', KEYS[1], 'rev', rev, 'last_update_time', ARGV[7], 'last_event_id', ARGV[4],
    'last_ms', ms)
end
-- '<revision> <stream id>': the revision answers retries, the stream id lets a watcher
-- resume after an event it names.
redis.call('HSET', KEYS[4], ARGV[4], rev .. ' ' .. stream_id)
redis.call('ZADD', KEYS[7], ARGV[7], ARGV[10])
if not cluster then redis.call('ZADD', KEYS[9], ARGV[7], ARGV[11]) end
if ARGV[12] ~= '' then
  local first, last = string.match(ARGV[12], '^(%S+) (%S+)$')
  local start, finish = tonumber(first), tonumber(last)
  -- A range ending after the summary's own entry would hide events stored after it.
  if math.floor(finish * 1000) > tonumber(ms) and full_reads == '' then
    full_reads = 'compaction'
  end
  -- Ranges this one contains no longer count (ADK keeps the containing summary, and the
  -- latest of equal ones); they all start at or after this one's start.
  for _, member in ipairs(redis.call('ZRANGE', KEYS[8], first, '+inf', 'BYSCORE')) do
    local other = tonumber(string.match(member, ' (%S+)$'))
    if other <= finish then redis.call('ZREM', KEYS[8], member) end
  end
  redis.call('ZADD', KEYS[8], first, stream_id .. ' ' .. ARGV[12])
end
if full_reads ~= '' and not meta[5] then redis.call('HSET', KEYS[1], 'full_reads', full_reads) end
if ARGV[19] ~= '0' and not meta[6] then redis.call('HSET', KEYS[1], 'has_state', 1) end
if ttl > 0 then
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
  redis.call('EXPIRE', KEYS[8], ttl)
end
local after = cluster and outbox() or expiry_due(KEYS[10], ARGV[16], tonumber(ARGV[17]))
if ARGV[15] ~= '' then return {1, rev, stream_id, after, catch_up()} end
return {1, rev, stream_id, after}
