-- Memory searches' filter and BM25 scoring, shared by memory_rank, memory_related and
-- memory_rescore (and _rank.lua's rank_postings). Prepended to every script that names it
-- on its '-- uses:' line (_redis/scripts.py) (a library, not a script: no KEYS, no ARGV).
-- idf(n, df): Lucene's BM25 idf of a term in df of n entries (never negative).
local function idf(n, df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

-- A search's filter and recency (memory/_filters.py): set_filter(spec) takes
-- Compiled.lua()'s "since<TAB>until<TAB>now<TAB>half-life<TAB>clause..." ('' = none; an
-- open end or no recency empty). passes(value) says whether an entry, by its context hash
-- value (nil: gone), is within the filter: its time (the first field) in the range, and
-- for each clause one of its tokens among the entry's (the last field, written with
-- filters; before, the last field is term:quarters pairs, with no kind token: within no
-- filter).
-- decay(ts): what recency multiplies the score of an entry of that time by (1: none).
local FILTER = nil

local function set_filter(spec)
  if spec == nil or spec == '' then FILTER = nil return end
  local parts = {}
  for part in string.gmatch(spec .. '\t', '([^\t]*)\t') do parts[#parts + 1] = part end
  local since, till = tonumber(parts[1]), tonumber(parts[2])
  local now, half = tonumber(parts[3]), tonumber(parts[4])
  FILTER = {since = since, till = till, now = now, half = half, clauses = {}}
  for i = 5, #parts do
    local clause = {}
    for token in string.gmatch(parts[i], '%S+') do clause[#clause + 1] = ' ' .. token .. ' ' end
    FILTER.clauses[#FILTER.clauses + 1] = clause
  end
  FILTER.active = FILTER.since ~= nil or FILTER.till ~= nil or #FILTER.clauses > 0
end

-- Whether an entry of time ts and tokens ' <token> ... ' is within the filter (an entry
-- written before filters has no kind token: it is within none).
local function within(ts, tokens)
  if not ts or (FILTER.since and ts < FILTER.since) or (FILTER.till and ts > FILTER.till) then
    return false
  end
  tokens = ' ' .. tokens .. ' '
  if not (string.find(tokens, ' ke ', 1, true) or string.find(tokens, ' kf ', 1, true)) then
    return false
  end
  for _, clause in ipairs(FILTER.clauses) do
    local any = false
    for _, token in ipairs(clause) do
      if string.find(tokens, token, 1, true) then any = true break end
    end
    if not any then return false end
  end
  return true
end

local function passes(value)
  if FILTER == nil or not FILTER.active then return true end
  if not value then return false end
  return within(tonumber(string.match(value, '^[^\t]*')), string.match(value, '\t([^\t]*)$') or '')
end

-- passes_brief(value): passes, of an entry's brief field of the context hash (' ' .. id:
-- "ts token ...").
local function passes_brief(value)
  if FILTER == nil or not FILTER.active then return true end
  if not value then return false end
  return within(tonumber(string.match(value, '^%S+')), value)
end

local function decay(ts)
  if FILTER == nil or FILTER.half == nil then return 1 end
  return 0.5 ^ (math.max(0, FILTER.now - ts) / FILTER.half)
end

-- BM25 over each entry's terms with their context, from the user's context hash
-- (id -> "ts<TAB>dl<TAB>author terms<TAB>neighbours JSON<TAB>own term:count ...<TAB>
-- term:quarters ...", written by _entries.lua's write_entries; entries of analysis 2 and
-- before have no own field): what both backends' searches score with.
-- scored_term(t, n, df, adf, author_weight): t (its term and qtf set) made ready for
--   best_entries: its idf, its author bonus, and a memo of which author fields name it.
-- query_terms(args, pos, count, n, author_weight): count terms read from args at pos, each
--   as term, times the query says it, its document frequency, its author's; returns
--   terms, the position after them.
-- best_entries(key, terms, stats, candidates, expand, limit): the candidates' ids scored,
--   then the neighbours of the best expand of them, and the best limit of all as
--   {id, score, ts} rows, best first (equal scores: newest, then larger id). An entry
--   holding the query's words only through its context ranks just below any neighbour
--   saying every one of them (BELOW).
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
      return tonumber(string.match(tf, '^%d+', at + #t.key))
    end
    from = at + 1
  end
end

-- Whether the "term:count ..." between positions from and to (excluded) holds t's term.
local function says(value, t, from, to)
  local start = from
  while true do
    local at = string.find(value, t.key, from, true)
    if not at or at >= to then return false end
    if at == start or string.byte(value, at - 1) == 32 then return true end
    from = at + 1
  end
end

-- A turn found only through its neighbours scores this much of the best neighbour saying
-- its words: just below, so it never outranks the turn it borrowed them from.
local BELOW = 1 - 1e-9

local function better(x, y)
  if x[2] ~= y[2] then return x[2] > y[2] end
  if x[3] ~= y[3] then return x[3] > y[3] end
  return x[1] > y[1]
end

local function best_entries(key, terms, stats, candidates, expand, limit)
  local avgdl, k1, b, sub_weight = stats[1], stats[2], stats[3], stats[4]
  local scored, rows, by = {}, {}, {}
  -- Which query words a row's own words say, by term index (memoised: only the rows that
  -- could be returned, and their neighbours, are asked); row.own: any.
  local function said(row)
    if row.said == nil then
      local out = {}
      row.own = false
      for _, i in ipairs(row.held) do  -- i < 0: found inside its text, so said
        local yes = i < 0 or row.h == nil or says(row[4], terms[i], row.g + 1, row.h)
        out[i < 0 and -i or i] = yes
        row.own = row.own or yes
      end
      row.said = out
    end
    return row.said
  end
  -- sources: keep only the entries saying a query word themselves.
  local function score(ids, sources)
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
          -- The own words end at h (none before analysis 3: all its words count as said).
          local h = string.find(value, '\t', g + 1, true)
          local dl = tonumber(string.sub(value, a + 1, c - 1))
          local au = string.sub(value, c + 1, e - 1)
          -- BM25's saturation and length normalisation: tf / (tf + k1 (1 - b + b dl / avgdl)).
          local norm = k1 * (1 - b + b * dl / avgdl)
          local s, held = 0, nil
          for ti, t in ipairs(terms) do
            local q, w, found = quarters(value, t, (h or g) + 1), nil, ti
            if q then
              local f = q / 4
              w = f * (k1 + 1) / (f + norm)
            elseif t.sub and t.sub[id] then
              w, found = sub_weight, -ti
            end
            if w then
              s = s + t.qtf * t.idf * w
              if held then held[#held + 1] = found else held = {found} end
            end
          end
          for _, t in ipairs(terms) do  -- the author only ranks what the words found
            if s > 0 and t.bonus and t.author[au] then s = s + t.bonus end
          end
          if s > 0 then
            local ts = tonumber(string.sub(value, 1, a - 1))
            -- Recency weighs the whole score: a turn found through its context still ranks
            -- below its source of the same age.
            local row = {id, s * decay(ts), ts, value, e + 1, g - 1}
            row.g, row.h, row.held = g, h, held
            if sources then said(row) end
            if row.own ~= false then
              by[id] = row
              -- Outside the filter: it may still cap a turn found through it, never return.
              if passes(value) then
                out[#out + 1] = row
                rows[#rows + 1] = row
              end
            end
          end
        end
      end
    end
    return out
  end
  local function around(row, into)
    local nb = string.sub(row[4], row[5], row[6])
    if nb ~= '[]' then
      for _, id in ipairs(cjson.decode(nb)) do into[#into + 1] = id end
    end
    return into
  end
  local first = score(candidates)
  table.sort(first, better)
  local near = {}
  for i = 1, math.min(expand, #first) do around(first[i], near) end
  score(near)
  table.sort(rows, better)
  -- A turn found only through its context ranks just below each neighbour saying every
  -- query word it holds. Only the rows that would be returned are checked: capping only
  -- lowers a score, and a capped row's sources (scored here when no backend proposed them)
  -- rank above it, so the check goes on until the first limit rows are all checked.
  local checked = {}
  repeat
    local changed = false
    for r = 1, math.min(limit, #rows) do
      local row = rows[r]
      if not checked[row[1]] then
        checked[row[1]] = true
        said(row)
        if not row.own then
          local ids = around(row, {})
          if #score(ids, true) > 0 then changed = true end
          for _, id in ipairs(ids) do
            local n = by[id]
            local covers = n ~= nil and said(n) and n.own
            for _, i in ipairs(row.held) do covers = covers and n.said[i < 0 and -i or i] end
            if covers and n[2] * BELOW < row[2] then
              row[2] = n[2] * BELOW
              changed = true
            end
          end
        end
      end
    end
    if changed then table.sort(rows, better) end
  until not changed
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
