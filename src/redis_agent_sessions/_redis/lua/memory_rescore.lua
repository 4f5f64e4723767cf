#!lua flags=no-writes
-- Search-backend ranking, last step: the candidates the search module proposed scored
-- exactly as the plain backend scores (memory_rank.lua), by BM25 over each one's terms with
-- their context, and the turns around the best of them too (_scoring.lua's best_entries).
-- uses: _permitted, _scoring
-- KEYS[1] context: the context hash (one user's)
-- KEYS[2]... holding: entry hashes holding a query word's grams
-- ARGV[1] filter: the search's filter ('' = none: _scoring.lua's set_filter); the
--   candidates are within it, their neighbours are returned only when within it too
-- ARGV[2] limit: at most this many entries
-- ARGV[3] indexed: entries indexed by terms (n)
-- ARGV[4] author_weight: the weight of an author term
-- ARGV[5] substring_weight: the weight of a substring match
-- ARGV[6] average_length: the average quarter length
-- ARGV[7] k1: BM25 k1
-- ARGV[8] b: BM25 b
-- ARGV[9] expand: how many of the best candidates have their neighbours scored
-- ARGV[10]... terms: the number of query terms, then for each (in the order scores are
--   summed): the term, times the query says it, its document frequency, its author
--   field's document frequency, the number of substring candidates (the newest entries
--   holding all the word's grams) and for each its KEYS index and id; then the number of
--   candidates and their ids
-- returns flat {id, score, ...}, best first (equal scores: newest, then larger id), at most
--         ARGV[2] entries, or {-4, command, key} when the ACL user may not run a command
-- One user's entries are alike to an ACL rule: asking for the first stands for the rest.
local refused = denied('HMGET', KEYS[1]) or (KEYS[2] and denied('HGET', KEYS[2]))
if refused then return refused end
set_filter(ARGV[1])
local limit, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local author_weight, sub_weight = tonumber(ARGV[4]), tonumber(ARGV[5])
local stats = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), sub_weight}
local expand = tonumber(ARGV[9])

-- Each term's fields, then its substring candidates: read them apart first.
local spec, subs, pos = {}, {}, 11
for i = 1, tonumber(ARGV[10]) do
  for j = 0, 3 do spec[#spec + 1] = ARGV[pos + j] end
  local count = tonumber(ARGV[pos + 4])
  subs[i] = {}
  for j = 1, count do
    subs[i][j] = {KEYS[tonumber(ARGV[pos + 3 + 2 * j])], ARGV[pos + 4 + 2 * j]}
  end
  pos = pos + 5 + 2 * count
end
local terms = query_terms(spec, 1, tonumber(ARGV[10]), n, author_weight)
local candidates = {}
for i, t in ipairs(terms) do
  if #subs[i] > 0 then
    t.sub = {}
    local matches = 0
    for _, sub in ipairs(subs[i]) do
      local said = redis.call('HGET', sub[1], 'lower')
      if said and string.find(said, t.term, 1, true) then
        t.sub[sub[2]] = true
        matches = matches + 1
        candidates[#candidates + 1] = sub[2]
      end
    end
    -- A word found inside more entries than have it as a term is that much less rare.
    local df = tonumber(spec[4 * i - 1])
    if matches > df then
      t.idf = idf(n, matches)
    end
  end
end
for i = pos + 1, pos + tonumber(ARGV[pos]) do candidates[#candidates + 1] = ARGV[i] end
return rows_reply(best_entries(KEYS[1], terms, stats, candidates, expand, limit), {})
