-- Deletes memory entries with their postings, all or nothing.
-- KEYS[1] entries zset   KEYS[2] deleted set   KEYS[3] texts hash   KEYS[4] ingestion set
-- KEYS[5..] entry hashes, session sets and posting zsets, referenced by index below
-- ARGV[1] '1' to remember deleted ids (they are then never re-ingested)
-- ARGV[2] '1' when the plain backend's postings are kept
-- ARGV[3] '1' to spare ids in KEYS[4] (a concurrent ingestion wants them)
-- ARGV[4] JSON list: {id, k = entry key index, s = session set index (0 = none),
--   x = words|grams read before (absent = entry was missing), o = posting key indexes,
--   only = session id the entry must still belong to (absent = any)}
-- returns {0} when an entry changed since it was read (nothing written: read and retry),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, entries deleted}
local postings, spare = ARGV[2] == '1', ARGV[3] == '1'
local ops = cjson.decode(ARGV[4])
local refused = denied('ZREM', KEYS[1])
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
  local cur = redis.call('HMGET', KEYS[op.k], 'words', 'grams', 'session')
  local stored = cur[1] and (cur[1] .. '|' .. (cur[2] or '')) or nil
  if postings and stored ~= op.x then return {0} end
  local kept = spare and redis.call('SISMEMBER', KEYS[4], op.id) == 1
  if not kept then
    op.missing = stored == nil
    op.drop = not op.missing and (op.only == nil or cur[3] == op.only)
    todo[#todo + 1] = op
  end
end
local n = 0
for _, op in ipairs(todo) do
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
return {1, n}
