#!lua flags=no-writes
-- Plain-backend search, first step: the entries saying the query's terms that score best on
-- their own terms (memory/_ranking.py scores them and their neighbours exactly next).
-- KEYS[1] stats hash (n, len)   KEYS[2] entries zset (id by time)   KEYS[3] texts hash
-- KEYS[4] document frequencies hash   KEYS[5] neighbours hash (id -> JSON ids)
-- KEYS[6..] posting zsets: a term's (entry id by weight) and gram ones (id by time)
-- ARGV[1] results asked   ARGV[2] most postings read in all
-- ARGV[3] most substring matches per term   ARGV[4] substring weight
-- ARGV[5] how many entries to return   ARGV[6] number of query terms, then for each (in the order scores are summed): the term,
--   times the query says it, its posting's KEYS index, the number of gram postings and their
--   KEYS indexes (an entry must be in all), and the substring to verify ('' = none)
-- returns {the user's entries, those indexed by terms (the others by 0.1: see `reindex`),
--         their total quarter length, postings read, then for each query term its
--         document frequency, its author's, the number of entries holding it as a
--         substring and those ids, then rows of id, score, neighbours (JSON)}, best first (equal scores:
--         newest, then larger id), at most ARGV[5] rows, or {-4, command, key} when the ACL
--         user may not run a command
-- Postings are read best weight first, a chunk at a time from the term whose next weight
-- could add most; each entry met is scored on the postings (ZSCORE in each). Reading stops
-- once the ARGV[1]-th best score beats anything an entry not yet met could still score, or
-- after ARGV[2] postings: a term in most entries is never read whole. The best ARGV[5] of
-- those met are returned.
local refused = denied_each('ZCARD', KEYS, 6) or denied_each('ZSCORE', KEYS, 6)
  or denied_each('ZREVRANGE', KEYS, 6) or denied('HMGET', KEYS[1], 'HGET', KEYS[3])
  or denied('ZSCORE', KEYS[2], 'ZCARD', KEYS[2], 'HMGET', KEYS[4], 'HMGET', KEYS[5])
if refused then return refused end
local limit, budget, sub_cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local sub_weight, expand = tonumber(ARGV[4]), tonumber(ARGV[5])
local stats = redis.call('HMGET', KEYS[1], 'n', 'len')
local n, len = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
local total = redis.call('ZCARD', KEYS[2])
if n <= 0 or limit <= 0 then return {total, n, len, 0} end
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
        if said and string.find(said, word, 1, true) then found[#found + 1] = id end
        if count >= sub_cap then break end
      end
    end
  end
  return found
end

local terms, names, candidates, order = {}, {}, {}, {}
local pos = 7
for _ = 1, tonumber(ARGV[6]) do
  local t = {term = ARGV[pos], qtf = tonumber(ARGV[pos + 1]), key = KEYS[tonumber(ARGV[pos + 2])], i = 0}
  local grams = {}
  for g = 1, tonumber(ARGV[pos + 3]) do grams[g] = KEYS[tonumber(ARGV[pos + 3 + g])] end
  local word = ARGV[pos + 4 + #grams]
  pos = pos + 5 + #grams
  t.found = {}
  t.inside = {}
  if word ~= '' and #grams > 0 then
    t.found = substring(grams, word)
    for _, id in ipairs(t.found) do
      t.inside[id] = true
      if not candidates[id] then candidates[id] = true; order[#order + 1] = id end
    end
  end
  local top = redis.call('ZREVRANGE', t.key, 0, 0, 'WITHSCORES')
  t.next = top[2] and tonumber(top[2]) or 0
  t.done = top[2] == nil
  terms[#terms + 1] = t
  names[#names + 1] = t.term
end
for i = 1, #terms do names[#names + 1] = '@' .. names[i] end
local df = #names > 0 and redis.call('HMGET', KEYS[4], unpack(names)) or {}
for i, t in ipairs(terms) do
  t.df = math.max(tonumber(df[i] or '0'), #t.found)
  t.adf = tonumber(df[#terms + i] or '0')
  t.idf = idf(t.df)
end

local scores = {}
local function score(id)
  local s = 0
  for _, t in ipairs(terms) do
    local w = tonumber(redis.call('ZSCORE', t.key, id))
    if not w and t.inside[id] then w = sub_weight end
    if w then s = s + t.qtf * t.idf * w end
  end
  return s
end

-- best: the limit best scores so far, descending; kept: the expand best.
local best, kept = {}, {}
local function push(list, size, s)
  if #list == size and s <= list[size] then return end
  local i = #list + 1
  if i > size then i = size end
  list[i] = s
  while i > 1 and list[i - 1] < list[i] do list[i - 1], list[i] = list[i], list[i - 1]; i = i - 1 end
end
local function consider(s) push(best, limit, s); push(kept, expand, s) end
for _, id in ipairs(order) do scores[id] = score(id); consider(scores[id]) end

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

local reply = {total, n, len, read}
for _, t in ipairs(terms) do
  reply[#reply + 1] = t.df
  reply[#reply + 1] = t.adf
  reply[#reply + 1] = #t.found
  for _, id in ipairs(t.found) do reply[#reply + 1] = id end
end
-- Equal scores go newest first: only the entries at or above the cut need their time.
local cut = kept[#kept]
local ranked = {}
for _, id in ipairs(order) do
  if cut and scores[id] >= cut and scores[id] > 0 then
    ranked[#ranked + 1] = {id, scores[id], tonumber(redis.call('ZSCORE', KEYS[2], id) or '0')}
  end
end
local at = #reply
ranked_reply(ranked, expand, reply)
-- After each id and score, its neighbours.
local out = {}
for i = 1, at do out[i] = reply[i] end
for i = at + 1, #reply, 2 do
  out[#out + 1] = reply[i]
  out[#out + 1] = reply[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[5], reply[i]) or '[]'
end
return out
