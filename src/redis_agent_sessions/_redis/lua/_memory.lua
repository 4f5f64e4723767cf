-- Memory scripts' shared helpers. Prepended to every script that names it on its '-- uses:'
-- line (_redis/scripts.py) (a library, not a script: no KEYS, no ARGV).
-- stored_sig(own, tf, dl, au, grams): what an entry (those fields, as HMGET read them) is
--   found by, as memory/_store.py's stored_sig spells it; nil when it does not exist.
-- idf(n, df): Lucene's BM25 idf of a term in df of n entries (never negative).
-- count_terms(deltas, tf, au, by): adds by to deltas[term] for each term of an entry's tf
--   ("term:quarters ...") and each of its author terms ("@a @b").
-- write_counts(key, deltas): applies deltas to the counts hash key, a term at 0 removed
--   (the caller asked for HMGET, HSET and HDEL on key).
-- POSTING_SCALE: a posting's score is its BM25 weight in units of 1/POSTING_SCALE, an
--   integer: a small sorted set compares integer scores without parsing each one.
local POSTING_SCALE = 10000

local function stored_sig(own, tf, dl, au, grams)
  if tf then return (own or '') .. '|' .. tf .. '|' .. dl .. '|' .. (au or '') .. '|' .. (grams or '') end
  return nil
end

local function idf(n, df) return math.log(1 + (n - df + 0.5) / (df + 0.5)) end

local function count_terms(deltas, tf, au, by)
  for term in string.gmatch(tf, '(%S+):%d+') do deltas[term] = (deltas[term] or 0) + by end
  for author in string.gmatch(au or '', '%S+') do deltas[author] = (deltas[author] or 0) + by end
end

-- A batch counts hundreds of terms: read and written a slice at a time (HMGET, HSET, HDEL),
-- not an HINCRBY each, as every command a script runs costs on its own.
local function write_counts(key, deltas)
  local terms = {}
  for term, by in pairs(deltas) do
    if by ~= 0 then terms[#terms + 1] = term end
  end
  for from = 1, #terms, 1000 do
    local slice = {unpack(terms, from, math.min(from + 999, #terms))}
    local now = redis.call('HMGET', key, unpack(slice))
    local set, gone = {}, {}
    for i, term in ipairs(slice) do
      local count = tonumber(now[i] or '0')
      -- Not a count (written by something else): the error HINCRBY gave here before, raised
      -- without running it (only learned facts' ACL line grants HINCRBY).
      if not count then return error('ERR hash value is not an integer') end
      count = count + deltas[term]
      if count > 0 then
        set[#set + 1] = term
        set[#set + 1] = string.format('%d', count)
      else
        gone[#gone + 1] = term
      end
    end
    if #set > 0 then redis.call('HSET', key, unpack(set)) end
    if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  end
end

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
  FILTER = {since = tonumber(parts[1]), till = tonumber(parts[2]),
    now = tonumber(parts[3]), half = tonumber(parts[4]), clauses = {}}
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

-- rank_postings(K, A, o): memory_rank.lua's ranking (see its header), with the fixed keys
--   named in K = {stats, texts, df, ctx} and its arguments read from A[o + 1] on (posting
--   keys by their KEYS index); returns the user's entries, the postings read and
--   best_entries' rows.
local function rank_postings(K, A, o)
  local limit, budget, sub_cap = tonumber(A[o + 1]), tonumber(A[o + 2]), tonumber(A[o + 3])
  local sub_weight, wanted, expand = tonumber(A[o + 4]), tonumber(A[o + 5]), tonumber(A[o + 6])
  local author_weight, k1, b = tonumber(A[o + 7]), tonumber(A[o + 8]), tonumber(A[o + 9])
  local stats = redis.call('HMGET', K.stats, 'n', 'len')
  local n, len = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
  if n <= 0 or limit <= 0 then return n, 0, {} end

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
          local said = redis.call('HGET', K.texts, id)
          if said and string.find(said, word, 1, true) then found[#found + 1] = id end
          if count >= sub_cap then break end
        end
      end
    end
    return found
  end

  -- Entries outside the filter are never candidates (nor their neighbours, through them).
  local outside = {}
  local function screen(ids)
    if FILTER == nil or not FILTER.active then return end
    local todo = {}
    for _, id in ipairs(ids) do
      if outside[id] == nil then outside[id] = true; todo[#todo + 1] = id end
    end
    for at = 1, #todo, 500 do
      local part = {unpack(todo, at, math.min(at + 499, #todo))}
      for i = 1, #part do part[i] = ' ' .. part[i] end
      local values = redis.call('HMGET', K.ctx, unpack(part))
      for i, value in ipairs(values) do outside[string.sub(part[i], 2)] = not passes_brief(value) end
    end
  end

  local screening = FILTER ~= nil and FILTER.active
  local terms, names, candidates, order = {}, {}, {}, {}
  local pos = o + 11
  for _ = 1, tonumber(A[o + 10]) do
    local t = {term = A[pos], qtf = tonumber(A[pos + 1]), i = 0}
    t.posting = KEYS[tonumber(A[pos + 2])]
    local grams = {}
    for g = 1, tonumber(A[pos + 3]) do grams[g] = KEYS[tonumber(A[pos + 3 + g])] end
    local word = A[pos + 4 + #grams]
    pos = pos + 5 + #grams
    t.found = {}
    if word ~= '' and #grams > 0 then
      t.sub = {}
      t.found = substring(grams, word)
      screen(t.found)
      for _, id in ipairs(t.found) do
        t.sub[id] = true
        if not candidates[id] and not outside[id] then candidates[id] = true; order[#order + 1] = id end
      end
    end
    local top = redis.call('ZREVRANGE', t.posting, 0, 0, 'WITHSCORES')
    t.next = top[2] and tonumber(top[2]) / POSTING_SCALE or 0
    t.done = top[2] == nil
    terms[#terms + 1] = t
    names[#names + 1] = t.term
  end
  for i = 1, #terms do names[#names + 1] = '@' .. names[i] end
  -- In slices: unpack() is bounded by the Lua stack, and a query may have many terms.
  local df = {}
  for at = 1, #names, 500 do
    local part = redis.call('HMGET', K.df, unpack(names, at, math.min(at + 499, #names)))
    for _, value in ipairs(part) do df[#df + 1] = value end
  end
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

  local read, seen = 0, #order
  -- The limit-th best first score so far (none yet: nothing is above it).
  local cut = #best == limit and best[limit] or -math.huge
  while read < budget do
    local bound, pick, gain = 0, nil, -1
    for _, t in ipairs(terms) do
      if not t.done then
        local g = t.qtf * t.idf * t.next
        bound = bound + g
        if g > gain then pick, gain = t, g end
      end
    end
    if pick == nil or cut > bound then break end
    -- Under a filter most of a posting is read anyway: fewer, larger chunks.
    local chunk = math.min(screening and 256 or 64, budget - read)
    local ids, weights, hi, lo, span = {}, nil, pick.next, 0, 1
    if screening then
      -- Under a filter most postings read are screened out (their briefs read too): their
      -- weights cost little beside, and keep the early stop as tight as it can be. One
      -- more than the chunk: its weight is the term's next (a call per chunk, not two).
      local rows = redis.call('ZREVRANGE', pick.posting, pick.i, pick.i + chunk, 'WITHSCORES')
      weights = {}
      for r = 1, math.min(#rows / 2, chunk) do
        ids[r], weights[r] = rows[2 * r - 1], tonumber(rows[2 * r])
      end
      if #rows > 2 * chunk then
        pick.next = tonumber(rows[#rows]) / POSTING_SCALE
      else
        pick.done = true
      end
    else
      -- The chunk's ids without their weights, which cost Redis 7 more to format than the
      -- ids to read (WITHSCORES: 0.6 against 0.2 us a posting): a posting's weight is
      -- taken between the chunk's first (the term's next) and the one after it (or its
      -- last), by its place. Weights fall slowly along a posting (a 64-chunk spans ~2% of
      -- it) and only choose which entries are scored exactly (best_entries); the early
      -- stop below compares with the chunk's lower end, which no posting in it is under.
      ids = redis.call('ZREVRANGE', pick.posting, pick.i, pick.i + chunk - 1)
      span = #ids
      local edge = span == chunk
        and redis.call('ZREVRANGE', pick.posting, pick.i + chunk, pick.i + chunk, 'WITHSCORES') or {}
      if edge[2] then
        lo = tonumber(edge[2]) / POSTING_SCALE
        pick.next = lo
      else
        pick.done = true
        span = math.max(span - 1, 1)
        if #ids > 0 then
          local at = pick.i + #ids - 1
          edge = redis.call('ZREVRANGE', pick.posting, at, at, 'WITHSCORES')
          lo = edge[2] and tonumber(edge[2]) / POSTING_SCALE or 0
        end
      end
    end
    local got = #ids
    pick.i = pick.i + chunk
    read = read + got
    local weight = pick.qtf * pick.idf
    if FILTER and FILTER.active then screen(ids) end
    -- The inner loop of a search (a thousand postings and more): no call, no division,
    -- one table lookup per posting where it can (scores, not also candidates: a posting
    -- read is past the substring step, the only reader of candidates).
    local top, step, floor = weight * hi, weight * (hi - lo) / span, weight * lo
    local sub, lost = pick.sub, weight * sub_weight
    if sub or screening then
      for r = 1, got do
        local id = ids[r]
        if not outside[id] then
          local s, least = top - step * (r - 1), floor
          if weights then  -- read: as exact as before the chunks were taken by place
            s = weight * weights[r] / POSTING_SCALE
            least = s
          end
          -- A word the entry says is not also counted as found inside its text.
          if sub and sub[id] then s, least = s - lost, least - lost end
          local had = scores[id]
          if had then
            scores[id] = had + s
          else
            seen = seen + 1
            order[seen] = id
            scores[id] = s
            -- A lower bound: the limit-th best never overstates.
            if least > cut then
              consider(least)
              if #best == limit then cut = best[limit] end
            end
          end
        end
      end
    else
      for r = 1, got do
        local id = ids[r]
        local had = scores[id]
        if had then
          scores[id] = had + top - step * (r - 1)
        else
          seen = seen + 1
          order[seen] = id
          scores[id] = top - step * (r - 1)
          if floor > cut then
            consider(floor)
            if #best == limit then cut = best[limit] end
          end
        end
      end
    end
  end

  -- The best candidates on their own words (equal: larger id first), scored with their context.
  -- A few hundred are scored whole (a small store is ranked exactly); of more, the best
  -- wanted (equal scores: larger id first): the wanted-th best score found with a heap of
  -- numbers as the entries met are counted, then those above it and the largest ids of
  -- those at it. Sorting every one met cost a search at 100,000 entries more than reading
  -- the postings; keeping the best ids in order as they came, a tenth of the script.
  local heap, size, count = {}, 0, 0  -- the best scores so far, the least on top
  for _, id in ipairs(order) do
    local s = scores[id]
    if s > 0 then
      count = count + 1
      if size < wanted then
        size = size + 1
        local i = size
        while i > 1 do
          local up = (i - i % 2) / 2
          if heap[up] <= s then break end
          heap[i] = heap[up]
          i = up
        end
        heap[i] = s
      elseif s > heap[1] then
        local i = 1
        while true do
          local c = 2 * i
          if c > size then break end
          if c < size and heap[c + 1] < heap[c] then c = c + 1 end
          if heap[c] >= s then break end
          heap[i] = heap[c]
          i = c
        end
        heap[i] = s
      end
    end
  end
  local whole = count <= 4 * wanted
  local cut, chosen, at, k = whole and 0 or heap[1], {}, {}, 0
  for _, id in ipairs(order) do
    local s = scores[id]
    if s > cut then
      k = k + 1
      chosen[k] = id
    elseif s == cut and not whole then
      at[#at + 1] = id
    end
  end
  table.sort(at, function(x, y) return x > y end)
  for i = 1, wanted - k do chosen[k + i] = at[i] end
  return n, read, best_entries(K.ctx, terms, {len / n, k1, b, sub_weight}, chosen, expand, limit)
end
