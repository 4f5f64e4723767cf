-- Memory writes' shared helpers: what memory_put, memory_delete and memory_facts compare an
-- entry by, and the user's term counts their entry writes (_entries.lua) keep.
-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py) (a
-- library, not a script: no KEYS, no ARGV).
-- stored_sig(own, tf, dl, au, grams): what an entry (those fields, as HMGET read them) is
--   found by, as memory/_store.py's stored_sig spells it; nil when it does not exist.
-- count_terms(deltas, tf, au, by): adds by to deltas[term] for each term of an entry's tf
--   ("term:quarters ...") and each of its author terms ("@a @b").
-- write_counts(key, deltas): applies deltas to the counts hash key, a term at 0 removed
--   (the caller asked for HMGET, HSET and HDEL on key).
local function stored_sig(own, tf, dl, au, grams)
  if tf then return (own or '') .. '|' .. tf .. '|' .. dl .. '|' .. (au or '') .. '|' .. (grams or '') end
  return nil
end

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
