#!lua flags=no-writes
-- Memory ranking, last step on both backends: candidate entries scored exactly by BM25
-- (memory/_ranking.py), from each one's terms with their context ("tf", quarter weights)
-- and length ("dl") and the user's counts.
-- KEYS[1] and on: candidate entry hashes and their neighbours' (one user's)
-- ARGV[1] limit   ARGV[2] entries indexed by terms (n)   ARGV[3] author weight
-- ARGV[4] substring weight   ARGV[5] average quarter length   ARGV[6] BM25 k1
-- ARGV[7] BM25 b   ARGV[8] how many of the best candidates have their neighbours scored
-- ARGV[9] number of query terms, then for each (in the order scores are summed): the
--   term, times the query says it, its document frequency, its author field's document
--   frequency, the number of substring candidates (the newest entries holding all the
--   word's grams) and their KEYS indexes; then the number of candidates and for each:
--   its KEYS index, the number of its neighbours and their KEYS indexes
-- returns flat {id, score, ...}, best first (equal scores: newest, then larger id), at most
--         ARGV[1] entries, or {-4, command, key} when the ACL user may not run a command
-- The candidates are scored, then the neighbours of the best ARGV[8] of them (a turn is
-- found by the words of the turns around it), and the best of all are returned.
-- One user's entries are alike to an ACL rule: asking for the first stands for the rest.
local refused = denied('HMGET', KEYS[1], 'HGET', KEYS[1])
if refused then return refused end
local limit, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local author_weight, sub_weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local avgdl, k1, b = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local expand = tonumber(ARGV[8])
local function idf(df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

local terms, pos = {}, 10
for _ = 1, tonumber(ARGV[9]) do
  local t = {term = ARGV[pos], key = ARGV[pos] .. ':', qtf = tonumber(ARGV[pos + 1]), sub = nil}
  local df, adf, subs = tonumber(ARGV[pos + 2]), tonumber(ARGV[pos + 3]), tonumber(ARGV[pos + 4])
  local matches = 0
  if subs > 0 then
    t.sub = {}
    for i = 1, subs do
      local key = KEYS[tonumber(ARGV[pos + 4 + i])]
      local said = redis.call('HGET', key, 'lower')
      if said and string.find(said, t.term, 1, true) then t.sub[key] = true; matches = matches + 1 end
    end
  end
  pos = pos + 5 + subs
  t.idf = idf(math.max(df, matches))
  if adf > 0 then t.bonus = author_weight * idf(adf) end
  t.author = setmetatable({}, {__index = function(seen, au)
    -- au is "@a @b": does it hold @term? (memoised: authors are few)
    local found = string.find(' ' .. au .. ' ', ' @' .. t.term .. ' ', 1, true) ~= nil
    rawset(seen, au, found)
    return found
  end})
  terms[#terms + 1] = t
end

-- tf is "term:quarters term:quarters ..." (terms are \w+ runs: never a ':' or a space).
local function quarters(tw, t)
  local from = 1
  while true do
    local at = string.find(tw, t.key, from, true)
    if not at then return nil end
    if at == 1 or string.byte(tw, at - 1) == 32 then
      return tonumber(string.match(tw, '^[^ ]+', at + #t.key))
    end
    from = at + 1
  end
end

-- {id, score, time} of an entry (score 0 when it is gone or has no term); each once.
local scored = {}
local function score(key)
  local known = scored[key]
  if known then return known end
  local row = redis.call('HMGET', key, 'id', 'ts', 'tf', 'dl', 'au')
  local s = 0
  if row[1] and row[3] then
    local tf, au = row[3], row[5] or ''
    -- BM25's saturation and length normalisation: tf / (tf + k1 (1 - b + b dl / avgdl)).
    local norm = k1 * (1 - b + b * tonumber(row[4]) / avgdl)
    for _, t in ipairs(terms) do
      local q, w = quarters(tf, t), nil
      if q then
        local f = q / 4
        w = f * (k1 + 1) / (f + norm)
      elseif t.sub and t.sub[key] then
        w = sub_weight
      end
      if w then s = s + t.qtf * t.idf * w end
    end
    for _, t in ipairs(terms) do  -- the author only ranks what the words found
      if s > 0 and t.bonus and t.author[au] then s = s + t.bonus end
    end
  end
  known = {row[1], s, tonumber(row[2] or '0')}
  scored[key] = known
  return known
end

local function better(x, y)
  if x[2] ~= y[2] then return x[2] > y[2] end
  if x[3] ~= y[3] then return x[3] > y[3] end
  return (x[1] or '') > (y[1] or '')
end
local candidates = {}
local count = tonumber(ARGV[pos])
pos = pos + 1
for _ = 1, count do
  local c = {key = KEYS[tonumber(ARGV[pos])], near = {}}
  for i = 1, tonumber(ARGV[pos + 1]) do c.near[i] = KEYS[tonumber(ARGV[pos + 1 + i])] end
  pos = pos + 2 + #c.near
  c.row = score(c.key)
  candidates[#candidates + 1] = c
end
for _, t in ipairs(terms) do  -- the substring matches are candidates too
  if t.sub then for key in pairs(t.sub) do score(key) end end
end
table.sort(candidates, function(x, y) return better(x.row, y.row) end)
for i = 1, math.min(expand, #candidates) do
  if candidates[i].row[2] > 0 then
    for _, key in ipairs(candidates[i].near) do score(key) end
  end
end
local ranked = {}
for _, row in pairs(scored) do
  if row[2] > 0 then ranked[#ranked + 1] = row end
end
return ranked_reply(ranked, limit, {})
