-- Memory scripts' shared helpers. Prepended to every script that names it on its '-- uses:'
-- line (_redis/scripts.py) (a library, not a script: no KEYS, no ARGV).
-- stored_sig(own, tf, dl, au, grams, words): what an entry (those fields, as HMGET read
--   them) is found by, as memory/_store.py's stored_sig spells it; nil when it does not exist.
-- idf(n, df): Lucene's BM25 idf of a term in df of n entries (never negative).
-- count_terms(deltas, tf, au, by): adds by to deltas[term] for each term of an entry's tf
--   ("term:quarters ...") and each of its author terms ("@a @b").
-- write_counts(key, deltas): applies deltas to the counts hash key, a term at 0 removed.
local function stored_sig(own, tf, dl, au, grams, words)
  if tf then return (own or '') .. '|' .. tf .. '|' .. dl .. '|' .. (au or '') .. '|' .. (grams or '') end
  if words then return 'v1|' .. words .. '|' .. (grams or '') end
  return nil
end

local function idf(n, df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

local function count_terms(deltas, tf, au, by)
  for term in string.gmatch(tf, '(%S+):%d+') do deltas[term] = (deltas[term] or 0) + by end
  for author in string.gmatch(au or '', '%S+') do deltas[author] = (deltas[author] or 0) + by end
end

local function write_counts(key, deltas)
  for term, by in pairs(deltas) do
    if by ~= 0 and redis.call('HINCRBY', key, term, by) <= 0 then redis.call('HDEL', key, term) end
  end
end

-- BM25 over each entry's terms with their context, from the user's context hash
-- (id -> "ts<TAB>dl<TAB>author terms<TAB>neighbours JSON<TAB>term:quarters ...", written
-- by memory/_store.py's context_value): what both backends' searches score with.
-- scored_term(t, n, df, adf, author_weight): t (its term and qtf set) made ready for
--   best_entries: its idf, its author bonus, and a memo of which author fields name it.
-- query_terms(args, pos, count, n, author_weight): count terms read from args at pos, each
--   as term, times the query says it, its document frequency, its author's; returns
--   terms, the position after them.
-- best_entries(key, terms, stats, candidates, expand, limit): the candidates' ids scored,
--   then the neighbours of the best expand of them, and the best limit of all as
--   {id, score, ts} rows, best first (equal scores: newest, then larger id).
--   stats = {avgdl, k1, b, sub_weight}; a term's sub = {[id] = true} for the entries holding
--   it inside a longer run (weighing sub_weight unless it is one of their terms).
local function scored_term(t, n, df, adf, author_weight)
  t.key = t.term .. ':'
  t.idf = idf(n, df)
  if adf > 0 then t.bonus = author_weight * idf(n, adf) end
  t.author = setmetatable({}, {__index = function(seen, au)
    -- au is "@a @b": does it hold @term? (memoised: authors are few)
    local found = string.find(' ' .. au .. ' ', ' @' .. t.term .. ' ', 1, true) ~= nil
    rawset(seen, au, found)
    return found
  end})
  return t
end

local function query_terms(args, pos, count, n, author_weight)
  local terms = {}
  for _ = 1, count do
    local t = {term = args[pos], qtf = tonumber(args[pos + 1])}
    terms[#terms + 1] = scored_term(t, n, tonumber(args[pos + 2]), tonumber(args[pos + 3]), author_weight)
    pos = pos + 4
  end
  return terms, pos
end

-- The quarters of a term in the "term:quarters term:quarters ..." that value holds from
-- position from on (terms are \w+ runs: never a ':', a space or a tab).
local function quarters(tf, t, from)
  local start = from
  while true do
    local at = string.find(tf, t.key, from, true)
    if not at then return nil end
    if at == start or string.byte(tf, at - 1) == 32 then
      return tonumber(string.match(tf, '^[^ ]+', at + #t.key))
    end
    from = at + 1
  end
end

local function better(x, y)
  if x[2] ~= y[2] then return x[2] > y[2] end
  if x[3] ~= y[3] then return x[3] > y[3] end
  return x[1] > y[1]
end

local function best_entries(key, terms, stats, candidates, expand, limit)
  local avgdl, k1, b, sub_weight = stats[1], stats[2], stats[3], stats[4]
  local scored, rows = {}, {}
  local function score(ids)
    local todo = {}
    for _, id in ipairs(ids) do
      if not scored[id] then scored[id] = true; todo[#todo + 1] = id end
    end
    local out = {}
    for at = 1, #todo, 500 do
      local part = {unpack(todo, at, math.min(at + 499, #todo))}
      local values = redis.call('HMGET', key, unpack(part))
      for i, id in ipairs(part) do
        local value = values[i]
        if value then
          -- Fields by their tabs, without copying the long ones.
          local a = string.find(value, '\t', 1, true)
          local c = string.find(value, '\t', a + 1, true)
          local e = string.find(value, '\t', c + 1, true)
          local g = string.find(value, '\t', e + 1, true)
          local dl = tonumber(string.sub(value, a + 1, c - 1))
          local au = string.sub(value, c + 1, e - 1)
          -- BM25's saturation and length normalisation: tf / (tf + k1 (1 - b + b dl / avgdl)).
          local norm = k1 * (1 - b + b * dl / avgdl)
          local s = 0
          for _, t in ipairs(terms) do
            local q, w = quarters(value, t, g + 1), nil
            if q then
              local f = q / 4
              w = f * (k1 + 1) / (f + norm)
            elseif t.sub and t.sub[id] then
              w = sub_weight
            end
            if w then s = s + t.qtf * t.idf * w end
          end
          for _, t in ipairs(terms) do  -- the author only ranks what the words found
            if s > 0 and t.bonus and t.author[au] then s = s + t.bonus end
          end
          if s > 0 then
            local row = {id, s, tonumber(string.sub(value, 1, a - 1)), value, e + 1, g - 1}
            out[#out + 1] = row
            rows[#rows + 1] = row
          end
        end
      end
    end
    return out
  end
  local first = score(candidates)
  table.sort(first, better)
  local near = {}
  for i = 1, math.min(expand, #first) do
    local nb = string.sub(first[i][4], first[i][5], first[i][6])
    if nb ~= '[]' then
      for _, id in ipairs(cjson.decode(nb)) do near[#near + 1] = id end
    end
  end
  score(near)
  table.sort(rows, better)
  local out = {}
  for i = 1, math.min(limit, #rows) do out[i] = rows[i] end
  return out
end

-- rows_reply(rows, out): {id, score, ...} of best_entries' rows appended to out (17 digits).
local function rows_reply(rows, out)
  for _, row in ipairs(rows) do
    out[#out + 1] = row[1]
    out[#out + 1] = string.format('%.17g', row[2])
  end
  return out
end
