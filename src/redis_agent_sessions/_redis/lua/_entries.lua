-- Memory entry writes, shared by memory_put, memory_delete and memory_facts.
-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py), after
-- _postings.lua and _counts.lua, whose names it uses (a library, not a script: no KEYS, no
-- ARGV).
-- K names the user's fixed keys: {entries = zset, texts = hash, stats = hash, df = hash,
-- ctx = hash}.
-- write_entries(K, todo, opt): stores each op of todo as memory_put.lua describes it, with
--   op.old = its stored fields (HMGET own tf dl au grams vkey), op.same = whether they
--   are found by what op is, op.stale = stored and not same; the user's counts and postings
--   follow, each term and posting written once. opt = {postings = postings kept, texts =
--   the plain backend's grams and texts kept too, cap = each term's posting kept to its
--   best CAPPED (the search backend's), k1, b, session = set to record ids in (or nil),
--   undelete = deleted set to take ids out of (or nil), counted = the batch's terms
--   counted ([term, n, ...]: memory_put.lua's counts; nil: each op's c list, [its terms
--   with the context, then its author terms]), skipped = ops counted there but not in
--   todo}. A user's first entries written
--   with capped postings mark the stats hash (tp = 1): every entry of theirs is in them.
--   The plain backend's postings are all kept (its substring step reads gram postings
--   whole, and a write keeps every posting exact).
-- write_sliced(command, key, values): command on key with values, 1,000 at a time.
-- entry_sig(op): what the entry of op (memory_put.lua's) is found by: own|tf|dl|au|grams,
--   as memory/_store.py's Doc.sig spells it.
-- drop_entries(K, todo, opt): deletes each op of todo as memory_delete.lua describes it,
--   with op.cur = its stored fields (HMGET own tf dl au grams), op.drop = delete it,
--   op.missing = it was not stored; returns how many were deleted. opt = {postings, texts,
--   tombstone = deleted set to remember ids in (or nil)}.
local function entry_sig(op)
  return op.own .. '|' .. op.tf .. '|' .. op.dl .. '|' .. op.au .. '|' .. op.gr
end

-- In slices: unpack() is bounded by the Lua stack.
local function write_sliced(command, key, values)
  for at = 1, #values, 1000 do
    redis.call(command, key, unpack(values, at, math.min(at + 999, #values)))
  end
end

-- The search backend's postings keep only each term's best this many: memory_rank.lua never
-- reads more than its read budget (memory/_ranking.py's READ_BUDGET) of them in all.
local CAPPED = 1500

local function write_entries(K, todo, opt)
  local postings = opt.postings
  -- What each entry adds to the user's keys is gathered and written once per key (a posting
  -- once per posting key) after the entries: per entry, they were half its commands. An id
  -- met twice keeps its last text, as when each was written in turn.
  local deltas, adds, grams = {}, {}, {}
  local counted = opt.counted
  if counted then
    for j = 1, #counted, 2 do deltas[counted[j]] = counted[j + 1] end
    for _, op in ipairs(opt.skipped) do count_terms(deltas, op.tf, op.au, -1) end
  end
  local texts, text_of, ctxs, by_time, ids = {}, {}, {}, {}, {}
  local stats = redis.call('HMGET', K.stats, 'n', 'len')
  local n, total = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
  if opt.cap and n <= 0 and #todo > 0 then redis.call('HSET', K.stats, 'tp', 1) end
  for _, op in ipairs(todo) do
    local cur = op.old
    if op.same and counted then count_terms(deltas, op.tf, op.au, -1) end
    if not op.same then
      if op.stale then  -- the entry's old terms leave the statistics
        n, total = n - 1, total - tonumber(cur[3])
        count_terms(deltas, cur[2], cur[4], -1)
      end
      if postings and op.stale then
        for _, i in ipairs(op.o) do redis.call('ZREM', KEYS[i], op.id) end
      end
      n, total = n + 1, total + op.dl
      if not counted then
        for _, term in ipairs(op.c) do deltas[term] = (deltas[term] or 0) + 1 end
      end
      if postings then
        -- tf / (tf + k1 (1 - b + b dl / avgdl)), in quarters: dl / avgdl = dl4 n / total4.
        local norm = opt.k1 * (1 - opt.b + opt.b * op.dl * n / total)
        local p = op.p
        for j = 1, #p, 2 do
          local tf = p[j + 1] / 4
          local add = adds[p[j]]
          if not add then add = {}; adds[p[j]] = add end
          add[#add + 1] = math.floor(POSTING_SCALE * tf * (opt.k1 + 1) / (tf + norm) + 0.5)
          add[#add + 1] = op.id
        end
        if opt.texts then
          for _, i in ipairs(op.g) do
            local add = grams[i]
            if not add then add = {}; grams[i] = add end
            add[#add + 1] = op.ts
            add[#add + 1] = op.id
          end
          if text_of[op.id] == nil then texts[#texts + 1] = op.id end
          text_of[op.id] = op.t
        end
      end
    end
    -- Its filter tokens last (_scoring.lua's passes): no term holds a space or a ':'. And
    -- under ' ' .. id (no id starts with a space), its time and tokens alone: what a
    -- filtered search reads of each entry it meets, a tenth of the bytes.
    ctxs[#ctxs + 1] = op.id
    ctxs[#ctxs + 1] = table.concat({op.ts, op.dl, op.au, op.nb, op.own, op.tf, op.fx or ''}, '\t')
    ctxs[#ctxs + 1] = ' ' .. op.id
    ctxs[#ctxs + 1] = op.ts .. ' ' .. (op.fx or '')
    local f = op.f
    f[#f + 1] = 'own'; f[#f + 1] = op.own
    f[#f + 1] = 'tf'; f[#f + 1] = op.tf
    f[#f + 1] = 'dl'; f[#f + 1] = op.dl
    f[#f + 1] = 'au'; f[#f + 1] = op.au
    f[#f + 1] = 'grams'; f[#f + 1] = op.gr
    if op.kv then
      local kept = redis.call('HMGET', KEYS[op.k], 'vec', 'vkey', 'vmodel')
      for i, name in ipairs({'vec', 'vkey', 'vmodel'}) do
        if kept[i] then op.f[#op.f + 1] = name; op.f[#op.f + 1] = kept[i] end
      end
    end
    local vec = op.vk and (op.v > 0 and ARGV[op.v] or redis.call('HGET', KEYS[op.k], 'vec'))
    if vec then
      -- In the one HSET: each write of an indexed hash is indexed anew.
      op.f[#op.f + 1] = 'vec'
      op.f[#op.f + 1] = vec
    end
    redis.call('DEL', KEYS[op.k])
    redis.call('HSET', KEYS[op.k], unpack(op.f))
    by_time[#by_time + 1] = op.ts
    by_time[#by_time + 1] = op.id
    ids[#ids + 1] = op.id
  end
  for i, add in pairs(adds) do
    write_sliced('ZADD', KEYS[i], add)
    if opt.cap then
      -- ZRANGE and ZREM, not ZREMRANGEBYRANK: the commands a worker's ACL already grants.
      local over = redis.call('ZCARD', KEYS[i]) - CAPPED
      while over > 0 do
        local low = redis.call('ZRANGE', KEYS[i], 0, math.min(over, 1000) - 1)
        redis.call('ZREM', KEYS[i], unpack(low))
        over = over - #low
      end
    end
  end
  for i, add in pairs(grams) do write_sliced('ZADD', KEYS[i], add) end
  local said, unsaid = {}, {}
  for _, id in ipairs(texts) do
    if text_of[id] ~= '' then
      said[#said + 1] = id
      said[#said + 1] = text_of[id]
    else
      unsaid[#unsaid + 1] = id
    end
  end
  write_sliced('HSET', K.texts, said)
  write_sliced('HDEL', K.texts, unsaid)
  write_sliced('HSET', K.ctx, ctxs)
  write_sliced('ZADD', K.entries, by_time)
  if opt.session then write_sliced('SADD', opt.session, ids) end
  if opt.undelete then write_sliced('SREM', opt.undelete, ids) end
  write_counts(K.df, deltas)
  if #todo > 0 then redis.call('HSET', K.stats, 'n', n, 'len', total) end
end

local function drop_entries(K, todo, opt)
  local deltas = {}
  local stats = redis.call('HMGET', K.stats, 'n', 'len')
  local entries, total = tonumber(stats[1] or '0'), tonumber(stats[2] or '0')
  local counted_any = false
  local n = 0
  for _, op in ipairs(todo) do
    if op.drop then  -- its terms leave the statistics
      entries, total, counted_any = entries - 1, total - tonumber(op.cur[3]), true
      count_terms(deltas, op.cur[2], op.cur[4], -1)
    end
    if (op.s or 0) > 0 then redis.call('SREM', KEYS[op.s], op.id) end
    if op.drop then
      if opt.postings then
        for _, i in ipairs(op.o) do redis.call('ZREM', KEYS[i], op.id) end
      end
      if opt.texts then redis.call('HDEL', K.texts, op.id) end
      redis.call('HDEL', K.ctx, op.id, ' ' .. op.id)
      n = n + redis.call('DEL', KEYS[op.k])
      if opt.tombstone then redis.call('SADD', opt.tombstone, op.id) end
    end
    if op.drop or op.missing then redis.call('ZREM', K.entries, op.id) end
  end
  write_counts(K.df, deltas)
  if counted_any and entries <= 0 then
    redis.call('HDEL', K.stats, 'n', 'len', 'tp')  -- the learned facts' counts stay
  elseif counted_any then
    redis.call('HSET', K.stats, 'n', entries, 'len', total)
  end
  return n
end
