-- Writes a batch of memory entries with their postings, all or nothing.
-- KEYS[1] entries zset   KEYS[2] deleted set   KEYS[3] session set   KEYS[4] ingestion set
-- KEYS[5] texts hash     KEYS[6..] entry hashes and posting zsets, referenced by index below
-- ARGV[1] 'replace' (overwrite), 'keep' (skip ids already stored) or 'explicit'
--         (overwrite, and a deleted id comes back)
-- ARGV[2] '1' when the plain backend's postings are kept   ARGV[3] '1' to record ids in KEYS[3]
-- ARGV[4] ttl seconds of KEYS[4] (0 = no ingestion set)
-- ARGV[5] '1' on the last batch of an ingestion: report the session's stale ids
-- ARGV[6] most stale ids reported   ARGV[7] JSON list of entries:
--   {id, k = entry key index, ts, f = [field, value, ...], sig = words|grams,
--    w = [posting key indexes], o = [old posting key indexes], x = sig those belong to,
--    t = text for KEYS[5] ('' = none),
--    vk = vector key (absent = no embedder), v = ARGV index of the entry's vector bytes
--    (0 = keep the stored vector, whose vkey must equal vk)}
-- ARGV[8..] vector bytes (binary, so outside the JSON)
-- returns {0} when an entry's stored words differ from x (nothing written: read and retry),
--         {2, ids...} when entries sent without a vector no longer have one stored under
--         their vk (nothing written: embed those and retry),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, written, stale ids of the session...} (ARGV[5] only; none left: KEYS[4]
--         is dropped)
local mode, postings = ARGV[1], ARGV[2] == '1'
local ops = cjson.decode(ARGV[7])
local refused = denied('SISMEMBER', KEYS[2], 'ZADD', KEYS[1])
for _, op in ipairs(ops) do
  local key = KEYS[op.k]
  refused = refused or denied('HMGET', key, 'HGET', key, 'DEL', key, 'HSET', key)
  if postings then
    for _, i in ipairs(op.w) do refused = refused or denied('ZADD', KEYS[i]) end
    for _, i in ipairs(op.o) do refused = refused or denied('ZREM', KEYS[i]) end
  end
end
-- An ingestion ends by deleting the session's stale entries (memory_delete.lua): a user who
-- may not do that is refused now, before its first batch is written.
local ingest = tonumber(ARGV[4]) > 0
refused = refused
  or (postings and denied('HSET', KEYS[5], 'HDEL', KEYS[5]))
  or (ARGV[3] == '1' and denied('SADD', KEYS[3]))
  or (mode == 'explicit' and denied('SREM', KEYS[2]))
  or (ingest and denied('SADD', KEYS[4], 'EXPIRE', KEYS[4], 'SDIFF', KEYS[4], 'DEL', KEYS[4],
    'SISMEMBER', KEYS[4], 'SDIFF', KEYS[3], 'SREM', KEYS[3], 'ZREM', KEYS[1]))
if refused then return refused end
local todo, unembedded = {}, {2}
for _, op in ipairs(ops) do
  local key = KEYS[op.k]
  local skip = mode ~= 'explicit' and redis.call('SISMEMBER', KEYS[2], op.id) == 1
  local cur = redis.call('HMGET', key, 'words', 'grams', 'vkey')
  local exists = cur[1] ~= false
  if mode == 'keep' and exists then skip = true end
  if not skip then
    local stored = exists and (cur[1] .. '|' .. (cur[2] or '')) or nil
    if postings and stored and stored ~= op.sig and stored ~= op.x then return {0} end
    op.stale = stored and stored ~= op.sig
    if op.vk and op.v == 0 and cur[3] ~= op.vk then unembedded[#unembedded + 1] = op.id end
    todo[#todo + 1] = op
  end
  if tonumber(ARGV[4]) > 0 then redis.call('SADD', KEYS[4], op.id) end
end
if #unembedded > 1 then return unembedded end
for _, op in ipairs(todo) do
  if postings then
    if op.stale then
      for _, i in ipairs(op.o) do redis.call('ZREM', KEYS[i], op.id) end
    end
    for _, i in ipairs(op.w) do redis.call('ZADD', KEYS[i], op.ts, op.id) end
    if op.t ~= '' then redis.call('HSET', KEYS[5], op.id, op.t) else redis.call('HDEL', KEYS[5], op.id) end
  end
  local vec = op.vk and (op.v > 0 and ARGV[op.v] or redis.call('HGET', KEYS[op.k], 'vec'))
  if vec then
    -- In the one HSET: each write of an indexed hash is indexed anew.
    op.f[#op.f + 1] = 'vec'
    op.f[#op.f + 1] = vec
  end
  redis.call('DEL', KEYS[op.k])
  redis.call('HSET', KEYS[op.k], unpack(op.f))
  redis.call('ZADD', KEYS[1], op.ts, op.id)
  if ARGV[3] == '1' then redis.call('SADD', KEYS[3], op.id) end
  if mode == 'explicit' then redis.call('SREM', KEYS[2], op.id) end
end
local reply = {1, #todo}
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[4], ARGV[4]) end
if ARGV[5] == '1' then
  local stale = redis.call('SDIFF', KEYS[3], KEYS[4])
  for i = 1, math.min(#stale, tonumber(ARGV[6])) do reply[#reply + 1] = stale[i] end
  if #stale == 0 then redis.call('DEL', KEYS[4]) end
end
return reply
