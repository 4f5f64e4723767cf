#!lua flags=no-writes
-- What a consolidation step reads of one user's facts (memory/_consolidate.py), in one call:
-- the facts whose time to live is over, and the facts most related to the step's events
-- (all of them when they are few; else the best ranked among the user's entries for the
-- events' words, as memory_rank.lua ranks, or by the search module's ranking given here),
-- each as its record: what the generator is shown, and what a change of it compares.
-- uses: _permitted, _postings, _scoring, _rank
-- KEYS[1] stats: the stats hash (KEYS[1..4] as memory_rank.lua's)
-- KEYS[2] texts: the texts hash
-- KEYS[3] df: the document frequencies hash
-- KEYS[4] context: the context hash
-- KEYS[5] facts: the facts zset (id -> last change)
-- KEYS[6] expiry: the facts' expiry zset (id -> ms)
-- KEYS[7] records: the fact records hash (id -> JSON)
-- KEYS[8]... postings: posting zsets (memory_rank.lua's)
-- ARGV[1] most: most facts shown
-- ARGV[2] now_ms: now, ms
-- ARGV[3] most_due: most facts past their time returned
-- ARGV[4] how: how the facts shown are chosen when there are more: 'rank' (memory_rank.lua's
--   ARGV follow, from ARGV[5]), 'ids' (ARGV[5] ids follow, ranked by the search module, best
--   first; none: the newest) or 'ask' (the caller ranks, then asks again)
-- ARGV[5]... choice: what ARGV[4] says follows
-- returns {2, 0} when the user has more facts than are shown and ARGV[4] is 'ask', else
--         {1, due count, id, record, ...}: the facts past their time first, then those
--         shown (a fact past its time is not shown; a record is nil when the fact is
--         gone), or {-4, command, key} when the ACL user may not run a command
local refused = denied('ZRANGE', KEYS[6], 'ZREVRANGE', KEYS[5], 'ZSCORE', KEYS[5],
    'HMGET', KEYS[7], 'HMGET', KEYS[1], 'HGET', KEYS[2], 'HMGET', KEYS[3], 'HMGET', KEYS[4])
  or denied_each('ZCARD', KEYS, 8) or denied_each('ZSCORE', KEYS, 8)
  or denied_each('ZREVRANGE', KEYS, 8)
if refused then return refused end
local most, how = tonumber(ARGV[1]), ARGV[4]
local due = redis.call('ZRANGE', KEYS[6], '-inf', ARGV[2], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
local skip = {}
for _, id in ipairs(due) do skip[id] = true end
-- One more than are shown: whether there are more than that, in the same read.
local newest = redis.call('ZREVRANGE', KEYS[5], 0, most)
local chosen = newest
if #newest > most then
  local ranked = {}
  if how == 'rank' then
    set_filter(ARGV[5])
    local _, _, rows = rank_postings({stats = KEYS[1], texts = KEYS[2], df = KEYS[3], ctx = KEYS[4]}, ARGV, 5)
    for i, row in ipairs(rows) do ranked[i] = row[1] end
  elseif how == 'ids' then
    for i = 1, tonumber(ARGV[5]) do ranked[i] = ARGV[5 + i] end
  else
    return {2, 0}
  end
  local found = {}
  for _, id in ipairs(ranked) do
    if #found >= most then break end
    if redis.call('ZSCORE', KEYS[5], id) then found[#found + 1] = id end
  end
  -- Turns with no word to rank by (";)") are shown the newest facts.
  chosen = #found > 0 and found or {unpack(newest, 1, most)}
end
local ids = {unpack(due)}
for _, id in ipairs(chosen) do
  if not skip[id] then ids[#ids + 1] = id end
end
local reply = {1, #due}
if #ids == 0 then return reply end
local records = redis.call('HMGET', KEYS[7], unpack(ids))
for i, id in ipairs(ids) do
  reply[#reply + 1] = id
  reply[#reply + 1] = records[i]
end
return reply
