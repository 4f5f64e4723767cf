-- Deletes memory entries with their postings, all or nothing.
-- uses: _permitted, _postings, _counts, _entries
-- KEYS[1] entries: the entries zset
-- KEYS[2] deleted: the deleted set
-- KEYS[3] texts: the texts hash
-- KEYS[4] ingestion: the ingestion set
-- KEYS[5] stats: the stats hash
-- KEYS[6] df: the document frequencies hash
-- KEYS[7] context: the context hash
-- KEYS[8]... referenced: entry hashes, session sets and posting zsets, referenced by index
--   below
-- ARGV[1] tombstone: '1' to remember deleted ids (they are then never re-ingested)
-- ARGV[2] postings: '1' the plain backend's postings (and texts), '2' the search backend's
--   (its terms'), '0' none
-- ARGV[3] spare_ingesting: '1' to spare ids in KEYS[4] (a concurrent ingestion wants them)
-- ARGV[4] entries_json: JSON list: {id, k = entry key index, s = session set index (0 =
--   none), x = the sig read before (own|tf|dl|au|grams; absent = entry was missing),
--   o = its posting key indexes (plain),
--   only = session id the entry must still belong to (absent = any)}
-- returns {0} when an entry changed since it was read (nothing written: read and retry),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, entries deleted}
local postings, texts, spare = ARGV[2] ~= '0', ARGV[2] == '1', ARGV[3] == '1'
local ops = cjson.decode(ARGV[4])
local refused = denied('ZREM', KEYS[1], 'HMGET', KEYS[5], 'HSET', KEYS[5], 'HDEL', KEYS[5],
  'HMGET', KEYS[6], 'HSET', KEYS[6], 'HDEL', KEYS[6])
for _, op in ipairs(ops) do
  refused = refused or denied('HMGET', KEYS[op.k], 'DEL', KEYS[op.k])
    or (op.s > 0 and denied('SREM', KEYS[op.s]))
  if postings then
    for _, i in ipairs(op.o) do refused = refused or denied('ZREM', KEYS[i]) end
  end
end
refused = refused
  or denied('HDEL', KEYS[7])
  or (texts and denied('HDEL', KEYS[3]))
  or (ARGV[1] == '1' and denied('SADD', KEYS[2]))
  or (spare and denied('SISMEMBER', KEYS[4]))
if refused then return refused end
local todo = {}
for _, op in ipairs(ops) do
  local cur = redis.call('HMGET', KEYS[op.k], 'own', 'tf', 'dl', 'au', 'grams', 'session')
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
local n = drop_entries({entries = KEYS[1], texts = KEYS[3], stats = KEYS[5], df = KEYS[6], ctx = KEYS[7]},
  todo, {postings = postings, texts = texts, tombstone = ARGV[1] == '1' and KEYS[2] or nil})
return {1, n}
