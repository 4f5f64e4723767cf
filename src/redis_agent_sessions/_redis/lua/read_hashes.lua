#!lua flags=no-writes
-- Reads many hashes in one call: a page of sessions' metadata and state hashes (single node).
-- One script reply costs the client far less than a pipeline of as many HGETALLs, whose
-- replies redis-py reads and converts one by one (3.3 vs 8.3 ms for 300 hashes).
-- uses: _permitted
-- KEYS[1]... hashes: the hashes to read (any number; no ARGV)
-- returns {hash 1 as a field/value list, ...} ({} for a missing one), {-3, key, error} when
--         a key has a foreign type, or {-4, command, key} when the ACL user may not run
--         a command it needs
local refused = denied_each('HGETALL', KEYS)
if refused then return refused end
local out = {}
for i, key in ipairs(KEYS) do
  local reply = redis.pcall('HGETALL', key)
  if reply['err'] then return {-3, key, reply['err']} end
  out[i] = reply
end
return out
