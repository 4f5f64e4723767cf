#!lua flags=no-writes
-- Search-backend ranking: the candidates the search module proposed, scored exactly as the
-- plain backend scores (memory_rank.lua), from each entry's stored term weights ("tw").
-- KEYS[1] and on: candidate entry hashes (one user's)
-- ARGV[1] limit   ARGV[2] entries indexed by terms (n)   ARGV[3] author weight
-- ARGV[4] substring weight   ARGV[5] number of query terms, then for each (in the order
--   scores are summed): the term, times the query says it, its document frequency, its
--   author field's document frequency, the number of substring candidates (the newest
--   entries holding all the word's grams) and their KEYS indexes
-- returns flat {id, score, ...}, best first (equal scores: newest, then larger id), at most
--         ARGV[1] entries, or {-4, command, key} when the ACL user may not run a command
-- One user's entries are alike to an ACL rule: asking for the first stands for the rest.
local refused = denied('HMGET', KEYS[1], 'HGET', KEYS[1])
if refused then return refused end
local limit, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local author_weight, sub_weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local function idf(df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

local terms, pos = {}, 6
for _ = 1, tonumber(ARGV[5]) do
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

-- tw is "term:weight term:weight ..." (terms are \w+ runs: never a ':' or a space).
local function weight(tw, t)
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

local ranked = {}
for _, key in ipairs(KEYS) do
  local row = redis.call('HMGET', key, 'id', 'ts', 'tw', 'au')
  if row[1] and row[3] then
    local tw, au, s = row[3], row[4] or '', 0
    for _, t in ipairs(terms) do
      local w = weight(tw, t)
      if not w and t.sub and t.sub[key] then w = sub_weight end
      if w then s = s + t.qtf * t.idf * w end
    end
    for _, t in ipairs(terms) do  -- the author only ranks what the words found
      if s > 0 and t.bonus and t.author[au] then s = s + t.bonus end
    end
    if s > 0 then ranked[#ranked + 1] = {row[1], s, tonumber(row[2])} end
  end
end
return ranked_reply(ranked, limit, {})
