-- Applies a generator's operations on one user's facts, all or nothing, each checked against
-- the revision the generator saw (compare-and-set), and moves the session's watermark.
-- uses: _permitted, _postings, _counts, _entries
-- KEYS[1] entries: the entries zset
-- KEYS[2] texts: the texts hash
-- KEYS[3] stats: the stats hash
-- KEYS[4] df: the document frequencies hash
-- KEYS[5] context: the context hash
-- KEYS[6] facts: the facts zset (id -> last change, s)
-- KEYS[7] expiry: the expiry zset (id -> ms)
-- KEYS[8] watermark: the session's watermark string
-- KEYS[9] read_events: the session's set of events read one by one
-- KEYS[10] records: the fact records hash (id -> what memory_related.lua returns of it)
-- KEYS[11]... referenced: entry hashes, history lists and posting zsets, referenced by index
--   below
-- ARGV[1] postings: '1' the plain backend's postings (terms, grams, texts), '2' the search
--   backend's (each term's best), '0' none
-- ARGV[2] k1: BM25 k1
-- ARGV[3] b: BM25 b
-- ARGV[4] seen_mark: the watermark the generator read ('' = none yet; '*' = do not check
--   it)
-- ARGV[5] new_mark: the watermark to set ('' = leave it)
-- ARGV[6] history_size: most revisions a history keeps (and none past its time: a history
--   expires with its last revision)
-- ARGV[7] now_ms: now, ms
-- ARGV[8] operations: JSON list of operations:
--   {id, a = 'add' | 'update' | 'delete' | 'expire', k = entry key index, h = history key
--    index, rev = the revision seen ('' for add), x = the stored sig read with it (plain),
--    o = its posting key indexes (plain), for add and update also memory_put.lua's entry
--    fields (ts, f, own, tf, dl, au, gr, nb, c, p, g, t, vk, v), exp = expiry ms (0 = none),
--    rec = its record for KEYS[10], was = JSON of what it said before, pushed on its
--    history (update), hx = when that revision leaves the history, ms (0 = never)}
-- ARGV[9] read: JSON list of event ids to mark read in KEYS[9] (given one by one)
-- ARGV[10]... vectors: vector bytes
-- returns {3} when the watermark is not ARGV[4], or one of ARGV[9]'s events is read
--         already (another worker read these events first),
--         {0, id} when a fact is not at the revision seen (or an expiry not due: nothing
--         written; read and generate again),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, facts written, facts deleted}; KEYS[3] counts the user's generations
--         (a watermark moved) and facts added, updated, deleted and expired
local postings, texts, capped = ARGV[1] ~= '0', ARGV[1] == '1', ARGV[1] == '2'
local now, keep = tonumber(ARGV[7]), tonumber(ARGV[6])
local ops = cjson.decode(ARGV[8])
local read = cjson.decode(ARGV[9])
local refused = denied('HMGET', KEYS[3], 'HSET', KEYS[3], 'HDEL', KEYS[3], 'HINCRBY', KEYS[3], 'HMGET', KEYS[4],
  'HSET', KEYS[4], 'HDEL', KEYS[4], 'HSET', KEYS[5], 'HDEL', KEYS[5], 'ZADD', KEYS[1], 'ZREM', KEYS[1],
  'ZADD', KEYS[6], 'ZREM', KEYS[6], 'ZADD', KEYS[7], 'ZREM', KEYS[7], 'GET', KEYS[8],
  'HSET', KEYS[10], 'HDEL', KEYS[10])
  or (ARGV[5] ~= '' and denied('SET', KEYS[8]))
  or (texts and denied('HSET', KEYS[2], 'HDEL', KEYS[2]))
  or (postings and (denied_each('ZADD', KEYS, 11) or denied_each('ZREM', KEYS, 11)))
  or (capped and (denied_each('ZCARD', KEYS, 11) or denied_each('ZRANGE', KEYS, 11)))
  or (#read > 0 and denied('SISMEMBER', KEYS[9], 'SADD', KEYS[9]))
for _, op in ipairs(ops) do
  refused = refused or denied('HMGET', KEYS[op.k], 'HGET', KEYS[op.k], 'DEL', KEYS[op.k],
    'HSET', KEYS[op.k], 'LPUSH', KEYS[op.h], 'LTRIM', KEYS[op.h], 'DEL', KEYS[op.h])
    or (op.was and denied('LRANGE', KEYS[op.h], 'EXPIRE', KEYS[op.h]))
end
if refused then return refused end

if ARGV[4] ~= '*' and (redis.call('GET', KEYS[8]) or '') ~= ARGV[4] then return {3} end
for _, id in ipairs(read) do
  if redis.call('SISMEMBER', KEYS[9], id) == 1 then return {3} end
end
local puts, drops = {}, {}
for _, op in ipairs(ops) do
  local cur = redis.call('HMGET', KEYS[op.k], 'own', 'tf', 'dl', 'au', 'grams', 'vkey', 'rev',
    'expires')
  local stored = stored_sig(cur[1], cur[2], cur[3], cur[4], cur[5])
  if (cur[7] or '') ~= op.rev then return {0, op.id} end
  if op.a == 'expire' and not (cur[8] and cur[8] ~= '' and tonumber(cur[8]) <= now) then
    return {0, op.id}
  end
  if op.a ~= 'add' and postings and stored ~= op.x then return {0, op.id} end
  if op.a == 'add' or op.a == 'update' then
    op.sig = entry_sig(op)
    op.same = stored == op.sig
    op.stale = stored ~= nil and not op.same
    op.old = cur
    puts[#puts + 1] = op
  else
    op.cur, op.missing, op.drop = cur, stored == nil, stored ~= nil
    drops[#drops + 1] = op
  end
end

-- A revision's time to leave its history, ms (0: none); a revision that cannot be read is
-- kept (history() names it corrupt), never an error halfway through these writes.
local function leaves_at(raw)
  local ok, revision = pcall(cjson.decode, raw)
  local at = ok and type(revision) == 'table' and revision.expires
  return type(at) == 'number' and math.floor(at * 1000) or 0
end

-- Pushes a revision on a history of at most `keep`, none past its time. Without times it
-- is a push and a trim; with them the history is written anew, with a time to live that
-- ends with its last revision's (a history no change comes to again is gone then, found
-- by no scan), and without one as soon as a revision has none.
local function push_revision(key, was, was_at)
  local kept, times, timed = {}, {}, was_at > 0
  if was_at == 0 or was_at > now then kept[1], times[1] = was, was_at end
  for _, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    local at = leaves_at(raw)
    timed = timed or at > 0
    if (at == 0 or at > now) and #kept < keep then
      kept[#kept + 1], times[#times + 1] = raw, at
    end
  end
  if not timed then  -- no revision here has a time, so neither has the list
    redis.call('LPUSH', key, was)
    redis.call('LTRIM', key, 0, keep - 1)
    return
  end
  local last = 0  -- the last revision's time; -1 when one has none
  for _, at in ipairs(times) do
    if at == 0 then
      last = -1
      break
    end
    last = math.max(last, at)
  end
  redis.call('DEL', key)
  for i = #kept, 1, -1000 do
    local chunk = {}
    for j = i, math.max(1, i - 999), -1 do chunk[#chunk + 1] = kept[j] end
    redis.call('LPUSH', key, unpack(chunk))
  end
  if #kept > 0 and last > 0 then redis.call('EXPIRE', key, math.ceil((last - now) / 1000)) end
end

local K = {entries = KEYS[1], texts = KEYS[2], stats = KEYS[3], df = KEYS[4], ctx = KEYS[5]}
local bm25 = {k1 = tonumber(ARGV[2]), b = tonumber(ARGV[3])}
write_entries(K, puts, {postings = postings, texts = texts, cap = capped, k1 = bm25.k1, b = bm25.b})
drop_entries(K, drops, {postings = postings, texts = texts})
for _, op in ipairs(puts) do
  redis.call('ZADD', KEYS[6], op.ts, op.id)
  redis.call('HSET', KEYS[10], op.id, op.rec)
  if op.exp > 0 then redis.call('ZADD', KEYS[7], op.exp, op.id) else redis.call('ZREM', KEYS[7], op.id) end
  if op.was then push_revision(KEYS[op.h], op.was, op.hx) end
end
for _, op in ipairs(drops) do
  redis.call('ZREM', KEYS[6], op.id)
  redis.call('HDEL', KEYS[10], op.id)
  redis.call('ZREM', KEYS[7], op.id)
  redis.call('DEL', KEYS[op.h])
end
if ARGV[5] ~= '' then redis.call('SET', KEYS[8], ARGV[5]) end
if #read > 0 then redis.call('SADD', KEYS[9], unpack(read)) end
-- What operators see in `stats`: the user's generations and what they changed.
local counts = {added = 0, updated = 0, deleted = 0, expired = 0}
for _, op in ipairs(ops) do
  local name = ({add = 'added', update = 'updated', delete = 'deleted', expire = 'expired'})[op.a]
  counts[name] = counts[name] + 1
end
if ARGV[5] ~= '' or #read > 0 then redis.call('HINCRBY', KEYS[3], 'generations', 1) end
for name, count in pairs(counts) do
  if count > 0 then redis.call('HINCRBY', KEYS[3], 'facts_' .. name, count) end
end
return {1, #puts, #drops}
