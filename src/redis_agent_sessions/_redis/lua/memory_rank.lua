#!lua flags=no-writes
-- Plain-backend search: one user's entries ranked by BM25 (memory/_analysis.py), best first.
-- KEYS[1] stats hash (n)   KEYS[2] entries zset (id by time)   KEYS[3] texts hash
-- KEYS[4..] posting zsets: a term's (entry id by weight) and gram ones (id by time)
-- ARGV[1] limit   ARGV[2] most postings read in all   ARGV[3] most substring matches per term
-- ARGV[4] author weight   ARGV[5] substring weight   ARGV[6] number of query terms, then for
--   each (in the order scores are summed): times the query says it, its posting's KEYS
--   index, its author posting's KEYS index, the number of gram postings and their KEYS
--   indexes (an entry must be in all), and the substring to verify in the text ('' = none)
-- returns {the user's entries, those indexed by terms (the others by 0.1: see `reindex`),
--         postings read, id, score, ...},
--         best first (equal scores: newest, then larger id), at most ARGV[1] entries, or
--         {-4, command, key} when the ACL user may not run a command
-- Postings are read best weight first, a chunk at a time from the term whose next weight
-- could add most; each entry met is scored exactly (ZSCORE in every posting). Reading stops
-- once the limit-th best score beats anything an entry not yet met could still score, or
-- after ARGV[2] postings (then the best of those met): a term in most entries is never read
-- whole.
local refused = denied_each('ZCARD', KEYS, 4) or denied_each('ZSCORE', KEYS, 4)
  or denied_each('ZREVRANGE', KEYS, 4) or denied('HGET', KEYS[1], 'HGET', KEYS[3])
  or denied('ZSCORE', KEYS[2], 'ZCARD', KEYS[2])
if refused then return refused end
local limit, budget, sub_cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local author_weight, sub_weight = tonumber(ARGV[4]), tonumber(ARGV[5])
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local total = redis.call('ZCARD', KEYS[2])
if n <= 0 or limit <= 0 then return {total, n, 0} end
local function idf(df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

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
        if said and string.find(said, word, 1, true) then found[id] = true end
        if count >= sub_cap then break end
      end
    end
  end
  return found
end

local terms, authors, candidates, order = {}, {}, {}, {}
local pos = 7
for _ = 1, tonumber(ARGV[6]) do
  local t = {qtf = tonumber(ARGV[pos]), key = KEYS[tonumber(ARGV[pos + 1])], i = 0, done = false}
  local author = KEYS[tonumber(ARGV[pos + 2])]
  local grams = {}
  for g = 1, tonumber(ARGV[pos + 3]) do grams[g] = KEYS[tonumber(ARGV[pos + 3 + g])] end
  local word = ARGV[pos + 4 + #grams]
  pos = pos + 5 + #grams
  local df = redis.call('ZCARD', t.key)
  local matches = 0
  if word ~= '' and #grams > 0 then
    t.sub = substring(grams, word)
    for id in pairs(t.sub) do
      matches = matches + 1
      if not candidates[id] then candidates[id] = true; order[#order + 1] = id end
    end
  end
  t.idf = idf(math.max(df, matches))
  local top = redis.call('ZREVRANGE', t.key, 0, 0, 'WITHSCORES')
  t.next = top[2] and tonumber(top[2]) or 0
  t.done = df == 0
  terms[#terms + 1] = t
  local adf = redis.call('ZCARD', author)
  if adf > 0 then authors[#authors + 1] = {key = author, bonus = author_weight * idf(adf)} end
end

local scores = {}
local function score(id)
  local s = 0
  for _, t in ipairs(terms) do
    local w = tonumber(redis.call('ZSCORE', t.key, id))
    if not w and t.sub and t.sub[id] then w = sub_weight end
    if w then s = s + t.qtf * t.idf * w end
  end
  for _, a in ipairs(authors) do  -- the author only ranks what the words found
    if s > 0 and redis.call('ZSCORE', a.key, id) then s = s + a.bonus end
  end
  return s
end

-- best: the limit best scores so far, descending.
local best = {}
local function consider(s)
  if #best == limit and s <= best[limit] then return end
  local i = #best + 1
  if i > limit then i = limit end
  best[i] = s
  while i > 1 and best[i - 1] < best[i] do best[i - 1], best[i] = best[i], best[i - 1]; i = i - 1 end
end
for _, id in ipairs(order) do scores[id] = score(id); consider(scores[id]) end

local bonus = 0
for _, a in ipairs(authors) do bonus = bonus + a.bonus end
local read = 0
while read < budget do
  local bound, pick, gain = bonus, nil, -1
  for _, t in ipairs(terms) do
    if not t.done then
      local g = t.qtf * t.idf * t.next
      bound = bound + g
      if g > gain then pick, gain = t, g end
    end
  end
  if pick == nil or (#best == limit and best[limit] > bound) then break end
  local chunk = math.min(64, budget - read)
  local rows = redis.call('ZREVRANGE', pick.key, pick.i, pick.i + chunk - 1, 'WITHSCORES')
  pick.i = pick.i + chunk
  read = read + #rows / 2
  for r = 1, #rows, 2 do
    local id = rows[r]
    if not candidates[id] then
      candidates[id] = true
      order[#order + 1] = id
      scores[id] = score(id)
      consider(scores[id])
    end
  end
  if #rows < 2 * chunk then
    pick.done = true
  else
    local peek = redis.call('ZREVRANGE', pick.key, pick.i, pick.i, 'WITHSCORES')
    if peek[2] then pick.next = tonumber(peek[2]) else pick.done = true end
  end
end

-- Equal scores go newest first: only the entries at or above the cut need their time.
local cut = best[#best]
local ranked = {}
for _, id in ipairs(order) do
  if cut and scores[id] >= cut and scores[id] > 0 then
    ranked[#ranked + 1] = {id, scores[id], tonumber(redis.call('ZSCORE', KEYS[2], id) or '0')}
  end
end
return ranked_reply(ranked, limit, {total, n, read})
