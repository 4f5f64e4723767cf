#!lua flags=no-writes
-- Plain-backend search: one user's entries ranked by BM25 (memory/_ranking.py), best first.
-- uses: _permitted, _memory
-- KEYS[1] stats: the stats hash (n, len)
-- KEYS[2] entries: the entries zset (id by time)
-- KEYS[3] texts: the texts hash
-- KEYS[4] df: the document frequencies hash
-- KEYS[5] context: the context hash (see _memory.lua)
-- KEYS[6]... postings: posting zsets: a term's (entry id by weight) and gram ones (id by time)
-- ARGV[1] limit: at most this many entries
-- ARGV[2] read_budget: most postings read in all
-- ARGV[3] substring_cap: most substring matches per term
-- ARGV[4] substring_weight: the weight of a substring match
-- ARGV[5] candidates: candidates scored
-- ARGV[6] expand: of which the best have their neighbours scored too
-- ARGV[7] author_weight: the weight of an author term
-- ARGV[8] k1: BM25 k1
-- ARGV[9] b: BM25 b
-- ARGV[10]... terms: the number of query terms, then for each (in the order scores are
--   summed): the term, times the query says it, its posting's KEYS index, the number of
--   gram postings and their KEYS indexes (an entry must be in all), and the substring to
--   verify ('' = none)
-- returns {the user's entries, those indexed by terms (the others by 0.1: see `reindex`),
--         postings read, id, score, ...}, best first (equal scores: newest, then larger
--         id), at most ARGV[1] entries, or {-4, command, key} when the ACL user may not run
--         a command
-- Candidates: postings are read best weight first, a chunk at a time from the term whose
-- next weight could add most; each entry met is scored on its own words as far as read
-- (what it scored in the postings read so far). Reading stops once the limit-th best of
-- those first scores beats anything an entry not yet met could still reach, or after the
-- read budget (ARGV[2]) of postings: a term in most entries is never read whole. The
-- best ARGV[5] candidates (all, when they are at most four times as many) are then scored
-- with their context, and the turns around the best ARGV[6] of them too (_memory.lua's
-- best_entries).
local refused = denied_each('ZCARD', KEYS, 6) or denied_each('ZSCORE', KEYS, 6)
  or denied_each('ZREVRANGE', KEYS, 6) or denied('HMGET', KEYS[1], 'HGET', KEYS[3])
  or denied('ZCARD', KEYS[2], 'HMGET', KEYS[4], 'HMGET', KEYS[5])
if refused then return refused end
local limit, budget, sub_cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local sub_weight, wanted, expand = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local author_weight, k1, b = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local stats = redis.call('HMGET', KEYS[1], 'n', 'len')
local n, len = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
local total = redis.call('ZCARD', KEYS[2])
if n <= 0 or limit <= 0 then return {total, n, 0} end

-- The newest entries (at most sub_cap) in every gram posting, whose text holds the word.
local function substring(keys, word)
  local smallest, size = nil, nil
  for _, key in ipairs(keys) do
    local c = redis.call('ZCARD', key)
    if size == nil or c < size then smallest, size = key, c end
  end
  local found, count, start = {}, 0, 0
  while count < sub_cap and start < size do
    local ids = redis.call('ZREVRANGE', smallest, start, start + 255)
    start = start + 256
    for _, id in ipairs(ids) do
      local all = true
      for _, key in ipairs(keys) do
        if key ~= smallest and not redis.call('ZSCORE', key, id) then all = false break end
      end
      if all then
        count = count + 1
        local said = redis.call('HGET', KEYS[3], id)
        if said and string.find(said, word, 1, true) then found[#found + 1] = id end
        if count >= sub_cap then break end
      end
    end
  end
  return found
end

local terms, names, candidates, order = {}, {}, {}, {}
local pos = 11
for _ = 1, tonumber(ARGV[10]) do
  local t = {term = ARGV[pos], qtf = tonumber(ARGV[pos + 1]), i = 0}
  t.posting = KEYS[tonumber(ARGV[pos + 2])]
  local grams = {}
  for g = 1, tonumber(ARGV[pos + 3]) do grams[g] = KEYS[tonumber(ARGV[pos + 3 + g])] end
  local word = ARGV[pos + 4 + #grams]
  pos = pos + 5 + #grams
  t.found = {}
  if word ~= '' and #grams > 0 then
    t.sub = {}
    t.found = substring(grams, word)
    for _, id in ipairs(t.found) do
      t.sub[id] = true
      if not candidates[id] then candidates[id] = true; order[#order + 1] = id end
    end
  end
  local top = redis.call('ZREVRANGE', t.posting, 0, 0, 'WITHSCORES')
  t.next = top[2] and tonumber(top[2]) or 0
  t.done = top[2] == nil
  terms[#terms + 1] = t
  names[#names + 1] = t.term
end
for i = 1, #terms do names[#names + 1] = '@' .. names[i] end
local df = #names > 0 and redis.call('HMGET', KEYS[4], unpack(names)) or {}
for i, t in ipairs(terms) do
  -- A word found inside more entries than have it as a term is that much less rare.
  local found = math.max(tonumber(df[i] or '0'), #t.found)
  scored_term(t, n, found, tonumber(df[#terms + i] or '0'), author_weight)
end

-- scores: what each entry met has scored so far on the postings read (a lower bound of its
-- score on its own words).
local scores = {}

-- best: the limit best scores so far, descending.
local best = {}
local function consider(s)
  if #best == limit and s <= best[limit] then return end
  local i = #best + 1
  if i > limit then i = limit end
  best[i] = s
  while i > 1 and best[i - 1] < best[i] do best[i - 1], best[i] = best[i], best[i - 1]; i = i - 1 end
end
for _, id in ipairs(order) do
  local s = 0
  for _, t in ipairs(terms) do
    if t.sub and t.sub[id] then s = s + t.qtf * t.idf * sub_weight end
  end
  scores[id] = s
  consider(s)
end

local read = 0
while read < budget do
  local bound, pick, gain = 0, nil, -1
  for _, t in ipairs(terms) do
    if not t.done then
      local g = t.qtf * t.idf * t.next
      bound = bound + g
      if g > gain then pick, gain = t, g end
    end
  end
  if pick == nil or (#best == limit and best[limit] > bound) then break end
  local chunk = math.min(64, budget - read)
  local rows = redis.call('ZREVRANGE', pick.posting, pick.i, pick.i + chunk - 1, 'WITHSCORES')
  pick.i = pick.i + chunk
  read = read + #rows / 2
  local weight = pick.qtf * pick.idf
  for r = 1, #rows, 2 do
    local id = rows[r]
    local s = weight * tonumber(rows[r + 1])
    -- A word the entry says is not also counted as found inside its text.
    if pick.sub and pick.sub[id] then s = s - weight * sub_weight end
    if candidates[id] then
      scores[id] = scores[id] + s
    else
      candidates[id] = true
      order[#order + 1] = id
      scores[id] = s
      consider(s)  -- a lower bound: the limit-th best never overstates
    end
  end
  if #rows < 2 * chunk then
    pick.done = true
  else
    local peek = redis.call('ZREVRANGE', pick.posting, pick.i, pick.i, 'WITHSCORES')
    if peek[2] then pick.next = tonumber(peek[2]) else pick.done = true end
  end
end

-- The best candidates on their own words (equal: larger id first), scored with their context.
local met = {}
for _, id in ipairs(order) do
  if scores[id] > 0 then met[#met + 1] = id end
end
table.sort(met, function(x, y)
  if scores[x] ~= scores[y] then return scores[x] > scores[y] end
  return x > y
end)
-- A few hundred are scored whole (a small store is ranked exactly).
local chosen = #met <= 4 * wanted and met or {unpack(met, 1, math.min(wanted, #met))}
local rows = best_entries(KEYS[5], terms, {len / n, k1, b, sub_weight}, chosen, expand, limit)
return rows_reply(rows, {total, n, read})
