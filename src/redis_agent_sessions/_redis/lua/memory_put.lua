-- Writes a batch of memory entries with their term statistics (and postings), all or nothing.
-- uses: _permitted, _postings, _counts, _entries
-- KEYS[1] entries: the entries zset
-- KEYS[2] deleted: the deleted set
-- KEYS[3] session: the session set
-- KEYS[4] ingestion: the ingestion set
-- KEYS[5] texts: the texts hash
-- KEYS[6] stats: the stats hash (n = entries indexed, len = their quarter lengths)
-- KEYS[7] df: the document frequencies hash (term -> entries found by it with their
--   context; @author -> entries)
-- KEYS[8] context: the context hash (id -> what a search scores it by)
-- KEYS[9]... referenced: entry hashes and posting zsets, referenced by index below
-- ARGV[1] mode: 'replace' (overwrite), 'keep' (skip ids already stored) or 'explicit'
--   (overwrite, and a deleted id comes back)
-- ARGV[2] postings: '1' the plain backend's postings (terms, grams, texts), '2' the search
--   backend's (each term's best, _entries.lua's CAPPED), '0' none
-- ARGV[3] record_session: '1' to record ids in KEYS[3]
-- ARGV[4] ingestion_ttl: ttl seconds of KEYS[4] (0 = no ingestion set)
-- ARGV[5] final: '1' on the last batch of an ingestion: report the session's stale ids
-- ARGV[6] stale_limit: most stale ids reported
-- ARGV[7] entries_json: JSON list of entries:
--   {id, k = entry key index, ts, f = [field, value, ...] but those it is found by: own
--    (term:count ...), tf (term:quarters ..., with the context), dl = quarter length with
--    the context, au (author terms), gr (its grams field); sig = own|tf|dl|au|grams (built
--    here: _entries.lua's entry_sig), x = the stored sig the posting indexes in o belong
--    to,
--    p = [posting key index, quarter weight, ...] of its own terms (flat),
--    nb = its neighbours' ids (JSON) for its field of KEYS[8] (ts, dl, au, nb, own, tf, fx),
--    g = [gram posting key indexes] (plain), o = [old posting key indexes] (plain),
--    t = text for KEYS[5] ('' = none), fx = its filter tokens, space-separated, for its
--    field of KEYS[8] (f holds them comma-separated, as field fx),
--    vk = vector key (absent = no embedder), v = ARGV index of the entry's vector bytes
--    (0 = keep the stored vector, whose vkey must equal vk), kv = 1 to keep the stored
--    vector fields as they are (no vk)}
-- ARGV[8] k1: BM25 k1
-- ARGV[9] b: BM25 b
-- ARGV[10] counts_json: JSON list [term, n, ...]: each term of the entries' tf and au and
--   how many of them have it, what the batch adds to KEYS[7] when every entry is written
--   (an entry skipped or stored the same has its terms taken back out: _entries.lua).
--   Counted by the client once per batch: per entry, their JSON lists were a third of the
--   batch's bytes and each term an update here.
-- ARGV[11]... vectors: vector bytes (binary, so outside the JSON)
-- returns {0} when an entry's stored sig differs from x (nothing written: read and retry),
--         {2, ids...} when entries sent without a vector no longer have one stored under
--         their vk (nothing written: embed those and retry),
--         {-4, command, key} when the ACL user may not run a command it needs (nothing
--         written),
--         else {1, written, stale ids of the session...} (ARGV[5] only; none left: KEYS[4]
--         is dropped)
-- Scores are computed when searching, from the entry's tf and dl and the user's counts; a
-- posting's score (BM25's saturated, length-normalised frequency against the average
-- length when it is written, in units of _postings.lua's POSTING_SCALE) only orders what a
-- search reads first.
local mode, postings, texts, capped = ARGV[1], ARGV[2] ~= '0', ARGV[2] == '1', ARGV[2] == '2'
local ops = cjson.decode(ARGV[7])
local k1, b = tonumber(ARGV[8]), tonumber(ARGV[9])
local refused = denied('SISMEMBER', KEYS[2], 'ZADD', KEYS[1], 'HMGET', KEYS[6], 'HSET', KEYS[6],
  'HMGET', KEYS[7], 'HSET', KEYS[7], 'HDEL', KEYS[7])
-- An ingestion ends by deleting the session's stale entries (memory_delete.lua): a user who
-- may not do that is refused now, before its first batch is written (their postings are
-- this user's too: ZREM is asked for the batch's).
local ingest = tonumber(ARGV[4]) > 0
-- Each key once per command: a batch names the same few thousand postings again and again.
local asked = {ZADD = {}, ZREM = {}, ZCARD = {}, ZRANGE = {}}
local function ask(command, i)
  if asked[command][i] then return nil end
  asked[command][i] = true
  return denied(command, KEYS[i])
end
for _, op in ipairs(ops) do
  local key = KEYS[op.k]
  refused = refused or denied('HMGET', key, 'DEL', key, 'HSET', key)
    or (op.vk and op.v == 0 and denied('HGET', key))
  if postings and not refused then
    local p = op.p
    for j = 1, #p, 2 do
      local i = p[j]
      refused = refused or ask('ZADD', i) or (ingest and ask('ZREM', i))
        or (capped and (ask('ZCARD', i) or ask('ZRANGE', i) or ask('ZREM', i)))
    end
    for _, i in ipairs(op.g) do refused = refused or ask('ZADD', i) or (ingest and ask('ZREM', i)) end
    for _, i in ipairs(op.o) do refused = refused or ask('ZREM', i) end
  end
end
refused = refused
  or denied('HSET', KEYS[8])
  or (texts and denied('HSET', KEYS[5], 'HDEL', KEYS[5]))
  or (ARGV[3] == '1' and denied('SADD', KEYS[3]))
  or (mode == 'explicit' and denied('SREM', KEYS[2]))
  or (ingest and denied('SADD', KEYS[4], 'EXPIRE', KEYS[4], 'SDIFF', KEYS[4], 'DEL', KEYS[4],
    'SISMEMBER', KEYS[4], 'SDIFF', KEYS[3], 'SREM', KEYS[3], 'ZREM', KEYS[1]))
if refused then return refused end

local counted = cjson.decode(ARGV[10])
local todo, unembedded, ingested, skipped = {}, {2}, {}, {}
for _, op in ipairs(ops) do
  local key = KEYS[op.k]
  op.sig = entry_sig(op)
  local skip = mode ~= 'explicit' and redis.call('SISMEMBER', KEYS[2], op.id) == 1
  local cur = redis.call('HMGET', key, 'own', 'tf', 'dl', 'au', 'grams', 'vkey')
  if mode == 'keep' and cur[2] then skip = true end
  if not skip then
    local stored = stored_sig(cur[1], cur[2], cur[3], cur[4], cur[5])
    if postings and stored and stored ~= op.sig and stored ~= op.x then return {0} end
    op.same = stored == op.sig
    op.stale = stored ~= nil and not op.same
    op.old = cur
    if op.vk and op.v == 0 and cur[6] ~= op.vk then unembedded[#unembedded + 1] = op.id end
    todo[#todo + 1] = op
  else
    skipped[#skipped + 1] = op
  end
  ingested[#ingested + 1] = op.id
end
if ingest then write_sliced('SADD', KEYS[4], ingested) end
if #unembedded > 1 then return unembedded end

-- A batch repeats the same terms and postings: counts and postings are gathered, then
-- written once per term and once per posting.
local K = {entries = KEYS[1], texts = KEYS[5], stats = KEYS[6], df = KEYS[7], ctx = KEYS[8]}
local session, undelete = ARGV[3] == '1' and KEYS[3] or nil, mode == 'explicit' and KEYS[2] or nil
write_entries(K, todo, {postings = postings, texts = texts, cap = capped, k1 = k1, b = b,
  session = session, undelete = undelete, counted = counted, skipped = skipped})
local reply = {1, #todo}
if ingest then redis.call('EXPIRE', KEYS[4], ARGV[4]) end
if ARGV[5] == '1' then
  local stale = redis.call('SDIFF', KEYS[3], KEYS[4])
  for i = 1, math.min(#stale, tonumber(ARGV[6])) do reply[#reply + 1] = stale[i] end
  if #stale == 0 then redis.call('DEL', KEYS[4]) end
end
return reply
