#!lua flags=no-writes
-- Plain-backend search: the entries matching the most query words, newest first.
-- uses: _permitted
-- KEYS[1] texts: the texts hash (entry id -> lowercased text)
-- KEYS[2]... postings: posting zsets (id by time)
-- ARGV[1] limit: at most this many entries
-- ARGV[2]... words: the number of query words, then for each word: the number of its
--   postings, that many KEYS indexes (an entry must be in all), and a substring the
--   entry's text must contain ('' = none)
-- returns flat {id, words matched, ...}, best first, at most ARGV[1] entries, or
--         {-4, command, key} when the ACL user may not run a command it needs
-- Levels, from all words down to one: an entry matching c of n words is in at least one
-- of any n - c + 1 of them, so the newest entries of level c come from merging only the
-- n - c + 1 smallest postings newest first, stopping as soon as the limit is reached.
local refused = denied_each('ZCARD', KEYS, 2) or denied_each('ZSCORE', KEYS, 2)
  or denied_each('ZREVRANGE', KEYS, 2) or denied('HGET', KEYS[1])
if refused then return refused end
local limit = tonumber(ARGV[1])
local terms = {}
local pos = 3
for _ = 1, tonumber(ARGV[2]) do
  local term = {keys = {}, verify = nil, size = nil}
  local count = tonumber(ARGV[pos])
  for i = 1, count do
    local key = KEYS[tonumber(ARGV[pos + i])]
    local size = redis.call('ZCARD', key)
    term.keys[i] = key
    if term.size == nil or size < term.size then term.primary, term.size = key, size end
  end
  term.verify = ARGV[pos + count + 1]
  pos = pos + count + 2
  if term.size > 0 then terms[#terms + 1] = term end
end
table.sort(terms, function(a, b) return a.size < b.size end)

local counts, texts = {}, {}
local function matched(id)
  if counts[id] then return counts[id] end
  local c = 0
  for _, term in ipairs(terms) do
    local ok = true
    for _, key in ipairs(term.keys) do
      if not redis.call('ZSCORE', key, id) then ok = false break end
    end
    if ok and term.verify ~= '' then
      if texts[id] == nil then texts[id] = redis.call('HGET', KEYS[1], id) or '' end
      ok = string.find(texts[id], term.verify, 1, true) ~= nil
    end
    if ok then c = c + 1 end
  end
  counts[id] = c
  return c
end

local function cursor(key)
  return {key = key, buf = {}, i = 1, start = 0, chunk = 16, done = false}
end
local function head(cur)
  if cur.i > #cur.buf and not cur.done then
    cur.buf = redis.call('ZREVRANGE', cur.key, cur.start, cur.start + cur.chunk - 1, 'WITHSCORES')
    cur.i, cur.start = 1, cur.start + cur.chunk
    cur.done = #cur.buf < 2 * cur.chunk
    cur.chunk = math.min(cur.chunk * 4, 1024)
  end
  if cur.i > #cur.buf then return nil end
  return cur.buf[cur.i], tonumber(cur.buf[cur.i + 1])
end

local out, found = {}, 0
for level = #terms, 1, -1 do
  local cursors, seen = {}, {}
  for t = 1, #terms - level + 1 do cursors[t] = cursor(terms[t].primary) end
  while found < limit do
    local best, best_id, best_score = nil, nil, nil
    for _, cur in ipairs(cursors) do
      local id, score = head(cur)
      if id and (best == nil or score > best_score or (score == best_score and id > best_id)) then
        best, best_id, best_score = cur, id, score
      end
    end
    if best == nil then break end
    best.i = best.i + 2
    if not seen[best_id] then
      seen[best_id] = true
      if matched(best_id) == level then
        out[#out + 1] = best_id
        out[#out + 1] = level
        found = found + 1
      end
    end
  end
  if found >= limit then break end
end
return out
