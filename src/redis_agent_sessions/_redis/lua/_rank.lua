-- The plain backend's ranking over postings, shared by memory_rank.lua and
-- memory_related.lua. Prepended to every script that names it on its '-- uses:' line
-- (_redis/scripts.py), after _postings.lua and _scoring.lua, whose names it uses (a
-- library, not a script: no KEYS, no ARGV).
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
