-- Deletes memory entries with their postings, all or nothing.
-- KEYS[1] entries zset   KEYS[2] deleted set   KEYS[3] texts hash   KEYS[4] ingestion set
-- KEYS[5] stats hash   KEYS[6] document frequencies hash (search backend)
-- KEYS[7..] entry hashes, session sets and posting zsets, referenced by index below
-- ARGV[1] '1' to remember deleted ids (they are then never re-ingested)
-- ARGV[2] '1' when the plain backend's postings are kept
-- ARGV[3] '1' to spare ids in KEYS[4] (a concurrent ingestion wants them)
-- ARGV[4] JSON list: {id, k = entry key index, s = session set index (0 = none),
--   x = the sig read before (tf|dl|au|grams, or v1|words|grams; absent = entry was
--   missing), o = its posting key indexes (plain),
--   only = session id the entry must still belong to (absent = any)}
-- returns {0} when an entry changed since it was read (nothing written: read and retry),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, entries deleted}
local postings, spare = ARGV[2] == '1', ARGV[3] == '1'
local ops = cjson.decode(ARGV[4])
local refused = denied('ZREM', KEYS[1], 'HMGET', KEYS[5], 'HSET', KEYS[5], 'DEL', KEYS[5])
  or (not postings and denied('HINCRBY', KEYS[6], 'HDEL', KEYS[6]))
for _, op in ipairs(ops) do
  refused = refused or denied('HMGET', KEYS[op.k], 'DEL', KEYS[op.k])
    or (op.s > 0 and denied('SREM', KEYS[op.s]))
  if postings then
    for _, i in ipairs(op.o) do refused = refused or denied('ZREM', KEYS[i]) end
  end
end
refused = refused
  or (postings and denied('HDEL', KEYS[3]))
  or (ARGV[1] == '1' and denied('SADD', KEYS[2]))
  or (spare and denied('SISMEMBER', KEYS[4]))
if refused then return refused end
local todo = {}
for _, op in ipairs(ops) do
  local cur = redis.call('HMGET', KEYS[op.k], 'tf', 'dl', 'au', 'grams', 'words', 'session')
  local stored = stored_sig(cur[1], cur[2], cur[3], cur[4], cur[5])
  if postings and stored ~= op.x then return {0} end
  local kept = spare and redis.call('SISMEMBER', KEYS[4], op.id) == 1
  if not kept then
    op.missing = stored == nil
    op.drop = not op.missing and (op.only == nil or cur[6] == op.only)
    op.cur = cur
    todo[#todo + 1] = op
  end
end
local function words_of(encoded, step)
  local out, i = {}, 0
  for word in string.gmatch(encoded or '', '%S+') do
    if i % step == 0 then out[#out + 1] = word end
    i = i + 1
  end
  return out
end
local stats = redis.call('HMGET', KEYS[5], 'n', 'len')
local entries, total = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
local counted = false
local n = 0
for _, op in ipairs(todo) do
  if op.drop and op.cur[1] then  -- its terms leave the statistics
    entries, total, counted = entries - 1, total - tonumber(op.cur[2]), true
    if not postings then
      for _, term in ipairs(words_of(op.cur[1], 2)) do
        if redis.call('HINCRBY', KEYS[6], term, -1) <= 0 then redis.call('HDEL', KEYS[6], term) end
      end
      for _, author in ipairs(words_of(op.cur[3], 1)) do
        if redis.call('HINCRBY', KEYS[6], author, -1) <= 0 then redis.call('HDEL', KEYS[6], author) end
      end
    end
  end
  if op.s > 0 then redis.call('SREM', KEYS[op.s], op.id) end
  if op.drop then
    if postings then
      for _, i in ipairs(op.o) do redis.call('ZREM', KEYS[i], op.id) end
      redis.call('HDEL', KEYS[3], op.id)
    end
    n = n + redis.call('DEL', KEYS[op.k])
    if ARGV[1] == '1' then redis.call('SADD', KEYS[2], op.id) end
  end
  if op.drop or op.missing then redis.call('ZREM', KEYS[1], op.id) end
end
if counted and entries <= 0 then
  redis.call('DEL', KEYS[5])
elseif counted then
  redis.call('HSET', KEYS[5], 'n', entries, 'len', total)
end
return {1, n}
